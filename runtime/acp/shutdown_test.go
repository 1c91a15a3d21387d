package acp_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// writeCounter counts what the runtime writes to the agent.
type writeCounter struct {
	io.ReadWriteCloser
	n *atomic.Int64
}

func (w writeCounter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return w.ReadWriteCloser.Write(p)
}

// TestShutdownDuringDialStartsNothing: a Start whose dial is still in
// progress when Shutdown returns must not bring the connection up after
// it (Shutdown waits for every goroutine of the runtime; one started
// after its Wait is nobody's).
func TestShutdownDuringDialStartsNothing(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var written atomic.Int64
	dial := sim.Dial(sim.Options{Logger: quietLogger()})
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Logger: quietLogger(),
		Dial: func(ctx context.Context) (io.ReadWriteCloser, error) {
			close(entered)
			<-release
			rwc, err := dial(ctx)
			return writeCounter{ReadWriteCloser: rwc, n: &written}, err
		}})
	started := make(chan error, 1)
	go func() {
		_, err := rt.Start(context.Background(), host.StartRequest{WorkspaceID: "ws1", SessionID: "s1"})
		started <- err
	}()
	<-entered
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-started; !errors.Is(err, acp.ErrShutdown) {
		t.Fatalf("start across a shutdown = %v, want ErrShutdown", err)
	}
	if n := written.Load(); n != 0 {
		t.Fatalf("the runtime talked to an agent after Shutdown returned (%d bytes)", n)
	}
}
