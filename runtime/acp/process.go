package acp

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is an agent child process seen as a transport: Read is its
// stdout, Write its stdin, Close stops it (stdin EOF, SIGTERM, then kill).
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *io.PipeReader
	grace  time.Duration
	log    *slog.Logger

	exited chan struct{} // closed after cmd.Wait returned
	once   sync.Once
}

// startProcess runs argv. stdout goes through an io.Pipe fed by os/exec's
// copier, so Wait returns only after everything the agent wrote was handed
// over, and WaitDelay still ends the stream if a grandchild keeps the pipe
// open after the agent exited.
func startProcess(argv []string, dir string, grace time.Duration, log *slog.Logger) (*process, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("empty agent command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.WaitDelay = grace
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = &stderrLog{log: log}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, stdin: stdin, stdout: pr, grace: grace, log: log, exited: make(chan struct{})}
	// Owned by the process: ends when the agent exits, which Close forces.
	go func() {
		err := cmd.Wait()
		pw.CloseWithError(io.EOF)
		close(p.exited)
		log.Info("agent process exited", "pid", cmd.Process.Pid, "status", cmd.ProcessState.String(), "err", err)
	}()
	return p, nil
}

func (p *process) Read(b []byte) (int, error)  { return p.stdout.Read(b) }
func (p *process) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Close stops the agent and waits until it is reaped.
func (p *process) Close() error {
	p.once.Do(func() {
		_ = p.stdin.Close()
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(p.grace)
			select {
			case <-p.exited:
			case <-t.C:
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
			t.Stop()
		}
		// Unblock a reader still waiting on the stream.
		_ = p.stdout.Close()
	})
	<-p.exited
	return nil
}

// stderrLog forwards the agent's stderr to the log, line by line.
type stderrLog struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (s *stderrLog) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, b...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.log.Info("agent stderr", "line", string(s.buf[:i]))
		s.buf = s.buf[i+1:]
	}
	if len(s.buf) > 64<<10 { // a line without end: flush what we have
		s.log.Info("agent stderr", "line", string(s.buf))
		s.buf = s.buf[:0]
	}
	return len(b), nil
}
