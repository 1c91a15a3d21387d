package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/internal/testenv"
)

// privatePostgres is a PostgreSQL server of the test's own (initdb into a
// temporary directory, its own port), so the test can crash it without
// touching the shared one.
type privatePostgres struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cred *syscall.Credential
}

// startPrivatePostgres initdbs and starts a private server, or skips the
// test when the PostgreSQL server binaries are not installed.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		testenv.Missing(t, "PostgreSQL server binaries (pg_ctl)", fmt.Errorf("none under /usr/lib/postgresql"))
	}
	pg := &privatePostgres{t: t, bin: filepath.Dir(bins[len(bins)-1])}
	dir, err := os.MkdirTemp("", "ensemble-pgcrash-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pg.dir = dir
	if os.Geteuid() == 0 {
		// initdb refuses root: run the server as the postgres OS user.
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Missing(t, "the postgres OS user", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pg.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	pg.run("initdb", "-D", pg.data(), "-A", "trust", "-U", "postgres", "--no-sync")
	pg.start()
	t.Cleanup(func() { _ = pg.ctl("stop", "-m", "immediate") })
	return pg
}

func (pg *privatePostgres) data() string { return filepath.Join(pg.dir, "data") }

func (pg *privatePostgres) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
}

func (pg *privatePostgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(pg.bin, name), args...)
	cmd.Dir = pg.dir
	if pg.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	}
	return cmd
}

func (pg *privatePostgres) run(name string, args ...string) {
	pg.t.Helper()
	if out, err := pg.command(name, args...).CombinedOutput(); err != nil {
		pg.t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func (pg *privatePostgres) ctl(args ...string) error {
	args = append([]string{"-D", pg.data(), "-w"}, args...)
	out, err := pg.command("pg_ctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (pg *privatePostgres) start() {
	pg.t.Helper()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c fsync=on", pg.port, pg.dir)
	if err := pg.ctl("start", "-o", opts, "-l", filepath.Join(pg.dir, "log")); err != nil {
		pg.t.Fatal(err)
	}
}

// crash stops the server the way a power cut does: no checkpoint, no
// goodbye to clients; the next start replays the WAL.
func (pg *privatePostgres) crash() {
	pg.t.Helper()
	if err := pg.ctl("stop", "-m", "immediate"); err != nil {
		pg.t.Fatal(err)
	}
}

// PostgreSQL is stopped with "immediate" while answers stream and started
// again. Every turn that completes has exactly the transcript the agent
// sent, byte for byte (the same deterministic answer a fault-free turn
// got); a turn that does not complete is settled explicitly, and nothing
// is left streaming.
func TestPostgresCrashMidStreamKeepsTranscriptsExact(t *testing.T) {
	if testing.Short() {
		t.Skip("PostgreSQL crash test: not in -short")
	}
	pg := startPrivatePostgres(t)
	bin := ensembleBinary(t)
	c := &cluster{t: t, dataDir: t.TempDir(), ws: "pgcrash"}
	c.args = []string{"--database-url", pg.url(), "--workspace", c.ws,
		"--agent", bin + " sim-agent --rate 2ms",
		"--http-request-rate", "-1", "--ws-request-rate", "-1", "--max-conns-per-user", "-1"}
	p := c.start()
	sid := c.createSession(p)
	const prompt = "/sim words=300"

	// The reference: what the agent sends for this prompt without faults.
	ref := c.submit(p, sid, "pgc-ref", prompt)
	if tr := c.waitSettled(p, sid, ref); tr.Outcome != "completed" {
		t.Fatalf("reference turn: %+v", tr)
	}
	var refPage struct {
		Messages []wireMessage `json:"messages"`
	}
	c.mustRest(p, http.MethodGet, "/sessions/"+sid+"/messages?limit=1000", nil, &refPage, http.StatusOK)
	want := agentTextOf(refPage.Messages, ref)
	if len(strings.Fields(want)) != 300 {
		t.Fatalf("reference answer has %d words", len(strings.Fields(want)))
	}

	const rounds = 3
	var turns []string
	for i := range rounds {
		id := fmt.Sprintf("pgc-%d", i)
		turnID := c.submit(p, sid, id, prompt)
		turns = append(turns, turnID)
		// Crash once part of the answer is durable.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var page struct {
				Messages []clusterMessage `json:"messages"`
			}
			if _, err := c.rest(p, http.MethodGet, "/sessions/"+sid+"/messages?limit=1000", nil, &page); err == nil {
				n := 0
				for _, m := range page.Messages {
					if m.TurnID == turnID && m.Role == "agent" {
						n += len(m.Content.Text)
					}
				}
				if n > 0 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the answer never started streaming")
			}
		}
		pg.crash()
		time.Sleep(time.Duration(200+100*i) * time.Millisecond)
		pg.start()
		settleDeadline := time.Now().Add(60 * time.Second)
		for {
			_, tr := c.canonical(p, sid)
			if tr.ID == turnID && tr.Phase == "settled" {
				break
			}
			if time.Now().After(settleDeadline) {
				t.Fatalf("turn %s never settled after the PostgreSQL restart: %+v; stderr:\n%s", turnID, tr, p.stderr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	var page struct {
		Messages []clusterMessage `json:"messages"`
	}
	c.mustRest(p, http.MethodGet, "/sessions/"+sid+"/messages?limit=1000", nil, &page, http.StatusOK)
	var tl struct {
		Turns []killTestTurn `json:"turns"`
	}
	c.mustRest(p, http.MethodGet, "/sessions/"+sid+"/turns?limit=50", nil, &tl, http.StatusOK)
	completed := 0
	for _, tr := range tl.Turns {
		var got strings.Builder
		for _, m := range page.Messages {
			if m.Streaming {
				t.Errorf("message %s still streaming after settlement", m.ID)
			}
			if m.TurnID == tr.ID && m.Role == "agent" {
				got.WriteString(m.Content.Text)
			}
		}
		switch {
		case tr.Phase != "settled":
			t.Errorf("turn %s not settled: %+v", tr.ID, tr)
		case tr.Outcome == "completed":
			completed++
			if got.String() != want {
				t.Errorf("turn %s (%s) completed with a transcript that differs from what the agent sent:\n got %d bytes: %.200q\nwant %d bytes: %.200q",
					tr.ID, tr.ClientSubmitID, got.Len(), got.String(), len(want), want)
			}
		case tr.FailureReason == "":
			t.Errorf("turn %s ended %s without a reason", tr.ID, tr.Outcome)
		}
	}
	t.Logf("%d of %d turns across %d PostgreSQL crashes completed", completed-1, rounds, rounds)
}
