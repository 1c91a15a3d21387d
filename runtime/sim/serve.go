package sim

import (
	"context"
	"io"

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
	input := gate.New(in)
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
