package sim

import (
	"bytes"
	"context"
	"io"
	"regexp"

	"github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/runtime/internal/gate"
)

// Serve runs the sim agent over one ACP byte stream (in: what the client
// writes, out: what the agent writes) until the client hangs up (nil) or ctx
// ends (ctx.Err()). Ending ctx stops every prompt; the SDK's reader stops
// when in is closed, which the caller owns (stdio: process exit).
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	opts = opts.withDefaults()
	opts.Logger = opts.Logger.With("component", "runtime/sim")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops prompts still running when the client left
	a := newAgent(ctx, opts)
	input := gate.New(&deafReader{r: in, ctx: ctx})
	conn := acp.NewAgentSideConnection(a, out, input)
	conn.SetLogger(opts.Logger)
	input.Open()
	a.setConn(conn)
	select {
	case <-conn.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deafReader is the agent's input. It implements the "/sim … deaf" fault:
// once a chunk carrying a prompt whose /sim line says deaf has been read,
// the agent reads nothing more — answers, cancels and prompts the client
// sends afterwards stall in the transport, as with an agent process that
// hangs without reading its stdin. Only ctx (the agent stopping) ends it.
type deafReader struct {
	r     io.Reader
	ctx   context.Context
	tail  []byte // the end of the previous chunk, for a directive split across reads
	stuck bool
}

// deafDirective matches a prompt text starting with a /sim line that has
// the deaf token, as it appears JSON-encoded on the wire.
var deafDirective = regexp.MustCompile(`"text":"\s*/sim [^"\\]*\bdeaf\b`)

func (d *deafReader) Read(p []byte) (int, error) {
	if d.stuck {
		<-d.ctx.Done()
		return 0, d.ctx.Err()
	}
	n, err := d.r.Read(p)
	if n > 0 {
		window := append(d.tail, p[:n]...)
		if bytes.Contains(window, []byte("session/prompt")) || bytes.Contains(window, []byte(`"text"`)) {
			if deafDirective.Match(window) {
				d.stuck = true
			}
		}
		if len(window) > 256 {
			window = window[len(window)-256:]
		}
		d.tail = append(d.tail[:0], window...)
	}
	return n, err
}
