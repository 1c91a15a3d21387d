package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// SpawnOptions say how to start `ensemble serve` replicas.
type SpawnOptions struct {
	Binary      string // the ensemble binary
	Replicas    int
	Secret      string // shared HS256 secret (passed in the environment, never on the command line)
	DatabaseURL string // passed through (empty: embedded SQLite per replica)
	RedisURL    string // passed through (empty: no cluster)
	DataDir     string // parent of the replicas' data dirs
	PprofAddrs  bool   // give each replica a --pprof-addr on a free loopback port
	Extra       []string
}

// Replica is one running `ensemble serve` process.
type Replica struct {
	Addr      string
	PprofAddr string
	DataDir   string
	cmd       *exec.Cmd
	stderr    *tailBuffer
	done      chan struct{}
}

// PID is the replica's process id.
func (r *Replica) PID() int { return r.cmd.Process.Pid }

// Stderr is the tail of the replica's log.
func (r *Replica) Stderr() string { return r.stderr.String() }

// FreeAddr is a free loopback TCP address.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Spawn starts the replicas and waits until each answers /readyz.
func Spawn(ctx context.Context, o SpawnOptions) ([]*Replica, error) {
	if o.DatabaseURL != "" {
		if err := CheckLoopback(o.DatabaseURL); err != nil {
			return nil, err
		}
	}
	if o.RedisURL != "" {
		if err := CheckLoopback(o.RedisURL); err != nil {
			return nil, err
		}
	}
	var reps []*Replica
	for i := range o.Replicas {
		r, err := spawnOne(ctx, o, i)
		if err != nil {
			StopAll(reps)
			return nil, err
		}
		reps = append(reps, r)
	}
	return reps, nil
}

func spawnOne(ctx context.Context, o SpawnOptions, i int) (*Replica, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	// One data dir for all: replicas without --database-url share its
	// SQLite file (as cluster mode allows on one machine).
	dir := filepath.Join(o.DataDir, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	args := []string{"serve", "--addr", addr, "--data-dir", dir, "--replica-id", fmt.Sprintf("loadtest-%d", i+1),
		"--log-level", "warn", "--workspace", "loadtest",
		// Scenarios open many connections and send many requests as one
		// user; the per-client limits (docs/security.md) would measure
		// themselves instead of the server.
		"--max-conns-per-user", "-1", "--ws-request-rate", "-1", "--http-request-rate", "-1"}
	if o.DatabaseURL != "" {
		args = append(args, "--database-url", o.DatabaseURL)
	}
	if o.RedisURL != "" {
		args = append(args, "--redis-url", o.RedisURL)
	}
	r := &Replica{Addr: addr, DataDir: dir, stderr: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	if o.PprofAddrs {
		if r.PprofAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof-addr", r.PprofAddr)
	}
	args = append(args, o.Extra...)
	cmd := exec.Command(o.Binary, args...)
	cmd.Env = append(os.Environ(), "ENSEMBLE_JWT_SECRET="+o.Secret)
	cmd.Stderr = r.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Binary, err)
	}
	r.cmd = cmd
	go func() { _ = cmd.Wait(); close(r.done) }()
	go func() { _, _ = io.Copy(io.Discard, stdout) }() // the sign-in link is not needed
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ctx.Err() != nil {
			r.Stop()
			return nil, ctx.Err()
		}
		select {
		case <-r.done:
			return nil, fmt.Errorf("replica %d exited at start: %s", i+1, strings.TrimSpace(r.stderr.String()))
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, fmt.Errorf("replica %d not ready within 60s: %s", i+1, r.stderr.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Stop ends the replica gracefully (SIGTERM), killing it after 15 s.
func (r *Replica) Stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// StopAll stops replicas concurrently.
func StopAll(reps []*Replica) {
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Add(1)
		go func() { defer wg.Done(); r.Stop() }()
	}
	wg.Wait()
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if t.b.Len() > t.max {
		rest := t.b.Bytes()[t.b.Len()-t.max/2:]
		t.b = *bytes.NewBuffer(append([]byte(nil), rest...))
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
