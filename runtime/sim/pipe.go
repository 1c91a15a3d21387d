package sim

import (
	"context"
	"errors"
	"io"
	"sync"
)

// Dial returns a dialer for runtime/acp's Config.Dial: each call starts a
// fresh sim agent (with its own sessions) in-process, connected by pipes.
// The returned stream reads what the agent writes and writes what it reads;
// Close stops the agent and waits for it.
func Dial(opts Options) func(ctx context.Context) (io.ReadWriteCloser, error) {
	return func(context.Context) (io.ReadWriteCloser, error) {
		agentIn, clientOut := io.Pipe()
		clientIn, agentOut := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		p := &pipeConn{
			r: clientIn, w: clientOut,
			agentIn: agentIn, agentOut: agentOut,
			cancel: cancel, done: make(chan struct{}),
		}
		o := opts
		o.Crash = p.crash
		// Owned by p: Close ends it by cancelling ctx and closing the pipes.
		go func() {
			defer close(p.done)
			_ = Serve(ctx, agentIn, agentOut, o)
		}()
		return p, nil
	}
}

var errSimCrashed = errors.New("sim agent crashed (simulated)")

// pipeConn is the client's end of an in-process sim agent.
type pipeConn struct {
	r *io.PipeReader // agent → client
	w *io.PipeWriter // client → agent

	agentIn  *io.PipeReader
	agentOut *io.PipeWriter

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (p *pipeConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }

// crash drops both directions at once, like a process dying mid-stream.
func (p *pipeConn) crash() {
	p.agentOut.CloseWithError(errSimCrashed)
	p.agentIn.CloseWithError(errSimCrashed)
}

// Close stops the agent and waits for it.
func (p *pipeConn) Close() error {
	p.once.Do(func() {
		p.cancel()
		_ = p.w.Close()
		_ = p.agentOut.Close()
		_ = p.r.Close()
	})
	<-p.done
	return nil
}
