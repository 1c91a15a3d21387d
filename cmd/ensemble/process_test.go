package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// The tests in this file run the real ensemble binary as a separate
// process, the way a user does.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// ensembleBinary builds ./cmd/ensemble once per test run.
func ensembleBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ensemble-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "ensemble")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// serverProc is one running `ensemble serve`.
type serverProc struct {
	cmd    *exec.Cmd
	addr   string
	link   string
	token  string
	stderr *lockedWriter
	done   chan struct{}
}

var signInRe = regexp.MustCompile(`Sign in: (http://\S+/#token=(\S+))`)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer runs `ensemble serve` on dataDir and waits for its sign-in
// link and readiness.
func startServer(t *testing.T, dataDir string, extra ...string) *serverProc {
	t.Helper()
	addr := freeAddr(t)
	for i := 0; i+1 < len(extra); i++ {
		if extra[i] == "--addr" { // a restart on the same address
			addr = extra[i+1]
		}
	}
	args := append([]string{"serve", "--addr", addr, "--data-dir", dataDir}, extra...)
	cmd := exec.Command(ensembleBinary(t), args...)
	cmd.Env = append(os.Environ(), "ENSEMBLE_JWT_SECRET=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &serverProc{cmd: cmd, addr: addr, stderr: &lockedWriter{w: &bytes.Buffer{}}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill(); <-p.done })

	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(30 * time.Second)
	for p.link == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("server exited before printing a sign-in link; stderr:\n%s", p.stderr)
			}
			if m := signInRe.FindStringSubmatch(line); m != nil {
				p.link, p.token = m[1], m[2]
			}
		case <-deadline:
			t.Fatalf("no sign-in link within 30s; stderr:\n%s", p.stderr)
		}
	}
	go func() {
		for range lines {
		}
	}()
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if i > 300 {
			t.Fatalf("server never became ready; stderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

func (p *serverProc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
}

// call makes one authenticated REST call and decodes the JSON answer.
func (p *serverProc) call(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+p.addr+"/v1/workspaces/default"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
	}
	return resp.StatusCode
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.w.String() }

// Minimal views of the wire shapes this test reads.
type wireTurn struct {
	ID            string `json:"id"`
	Phase         string `json:"phase"`
	Outcome       string `json:"outcome"`
	FailureReason string `json:"failureReason"`
	StopReason    string `json:"stopReason"`
}

type wireMessage struct {
	ID      string `json:"id"`
	TurnID  string `json:"turnId"`
	Role    string `json:"role"`
	Version int64  `json:"version"`
	Content struct {
		Text string `json:"text"`
	} `json:"content"`
}

func (p *serverProc) messages(t *testing.T, sessionID string) []wireMessage {
	t.Helper()
	var page struct {
		Messages []wireMessage `json:"messages"`
	}
	if code := p.call(t, http.MethodGet, "/sessions/"+sessionID+"/messages?limit=1000", nil, &page); code != http.StatusOK {
		t.Fatalf("message.list: %d", code)
	}
	return page.Messages
}

func (p *serverProc) turn(t *testing.T, sessionID string) wireTurn {
	t.Helper()
	var page struct {
		Turns []wireTurn `json:"turns"`
	}
	p.call(t, http.MethodGet, "/sessions/"+sessionID+"/turns?limit=1", nil, &page)
	if len(page.Turns) == 0 {
		t.Fatal("no turns")
	}
	return page.Turns[0]
}

// continueFresh checks the session is marked contextLost and makes the
// explicit choice to go on in a fresh agent session.
func (p *serverProc) continueFresh(t *testing.T, sessionID string) {
	t.Helper()
	var got struct {
		Session struct {
			ContextLost bool `json:"contextLost"`
		} `json:"session"`
	}
	for deadline := time.Now().Add(20 * time.Second); !got.Session.ContextLost; time.Sleep(20 * time.Millisecond) {
		p.call(t, http.MethodGet, "/sessions/"+sessionID, nil, &got)
		if time.Now().After(deadline) {
			t.Fatalf("session %s never marked contextLost", sessionID)
		}
	}
	var after struct {
		Session struct {
			ID          string `json:"id"`
			ContextLost bool   `json:"contextLost"`
		} `json:"session"`
	}
	if code := p.call(t, http.MethodPost, "/sessions/"+sessionID+"/continue-fresh", map[string]any{}, &after); code != http.StatusOK ||
		after.Session.ID != sessionID || after.Session.ContextLost {
		t.Fatalf("session.continueFresh: %d %+v", code, after)
	}
}

func agentWords(ms []wireMessage) int {
	n := 0
	for _, m := range ms {
		if m.Role == "agent" {
			n += len(strings.Fields(m.Content.Text))
		}
	}
	return n
}

// A server killed mid-turn restarts on the same data dir with the turn
// failed/execution_status_unknown, the transcript up to the crash intact,
// and the session ready for a new prompt.
func TestCrashMidTurnAndRestart(t *testing.T) {
	dataDir := t.TempDir()
	p := startServer(t, dataDir)

	var created struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if code := p.call(t, http.MethodPost, "/sessions", map[string]any{}, &created); code != http.StatusCreated {
		t.Fatalf("session.create: %d", code)
	}
	sid := created.Session.ID
	var sent struct {
		Turn wireTurn `json:"turn"`
	}
	if code := p.call(t, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
		"clientSubmitId": "crash-1", "content": map[string]any{"text": "/sim words=5000 rate=10ms"},
	}, &sent); code != http.StatusOK {
		t.Fatalf("submit: %d", code)
	}
	var before []wireMessage
	for deadline := time.Now().Add(20 * time.Second); agentWords(before) < 30; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the answer never streamed; stderr:\n%s", p.stderr)
		}
		before = p.messages(t, sid)
	}

	p.kill()
	<-p.done
	// The agent loses the session with the crash: the sim keeps its
	// sessions in the data dir, as real agents keep theirs on disk, so its
	// state goes too (a lost or wiped agent state, which is what
	// context_lost is for).
	if err := os.RemoveAll(simStateDir(dataDir)); err != nil {
		t.Fatal(err)
	}

	q := startServer(t, dataDir)
	tr := q.turn(t, sid)
	if tr.ID != sent.Turn.ID || tr.Phase != "settled" || tr.Outcome != "failed" || tr.FailureReason != "execution_status_unknown" ||
		tr.StopReason == "server_shutdown" { // a crash is not a planned restart
		t.Fatalf("after restart the turn reads %+v", tr)
	}
	after := q.messages(t, sid)
	byID := map[string]wireMessage{}
	for _, m := range after {
		byID[m.ID] = m
	}
	for _, m := range before {
		got, ok := byID[m.ID]
		if !ok || !strings.HasPrefix(got.Content.Text, m.Content.Text) {
			t.Fatalf("message %s lost or rewritten across the crash:\nbefore %q\nafter  %q", m.ID, m.Content.Text, got.Content.Text)
		}
	}

	// The restarted (embedded) agent lost the session with its state: the
	// prompt is not sent behind the user's back; continuing fresh is an
	// explicit choice.
	var next struct {
		Turn  wireTurn `json:"turn"`
		Error struct {
			Code   string `json:"code"`
			Reason string `json:"reason"`
		} `json:"error"`
	}
	submit := map[string]any{"clientSubmitId": "crash-2", "content": map[string]any{"text": "/sim words=3"}}
	if code := q.call(t, http.MethodPost, "/sessions/"+sid+"/messages", submit, &next); code != http.StatusConflict ||
		next.Error.Code != "not_dispatched" || next.Error.Reason != "context_lost" {
		t.Fatalf("submit after restart: %d %+v", code, next.Error)
	}
	q.continueFresh(t, sid)
	if code := q.call(t, http.MethodPost, "/sessions/"+sid+"/messages", submit, &next); code != http.StatusOK {
		t.Fatalf("retry after continuing fresh: %d", code)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if tr := q.turn(t, sid); tr.ID == next.Turn.ID && tr.Outcome == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new prompt never completed: %+v", q.turn(t, sid))
		}
	}
	// The crashed turn's id, retried, returns that turn and is not resent.
	var replay struct {
		Turn     wireTurn `json:"turn"`
		Replayed bool     `json:"replayed"`
	}
	q.call(t, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
		"clientSubmitId": "crash-1", "content": map[string]any{"text": "/sim words=5000 rate=10ms"},
	}, &replay)
	if replay.Turn.ID != sent.Turn.ID || !replay.Replayed || replay.Turn.Outcome != "failed" {
		t.Fatalf("replay after restart: %+v", replay)
	}
}

// The default serve prints a sign-in link whose token works, keeps the
// secret private, and answers health and readiness.
func TestServePrintsWorkingSignInLink(t *testing.T) {
	dataDir := t.TempDir()
	p := startServer(t, dataDir)
	if !strings.HasPrefix(p.link, "http://"+p.addr+"/#token=") {
		t.Fatalf("link %q must carry the token in the fragment", p.link)
	}
	fi, err := os.Stat(filepath.Join(dataDir, "jwt-secret"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi, err)
	}
	var list struct {
		Sessions []any `json:"sessions"`
	}
	if code := p.call(t, http.MethodGet, "/sessions", nil, &list); code != http.StatusOK {
		t.Fatalf("the printed token must work: %d", code)
	}
	resp, err := http.Get("http://" + p.addr + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	if strings.Contains(p.stderr.String(), p.token) {
		t.Fatal("the token must never be logged")
	}
}

// `--agent` runs an ACP agent as a child process; here the agent is this
// binary's own `sim-agent` over stdio, so the whole path of a real agent
// process (spawn, initialize, prompt, stream, exit) is exercised.
func TestServeWithAgentProcess(t *testing.T) {
	bin := ensembleBinary(t)
	p := startServer(t, t.TempDir(), "--agent", bin+" sim-agent --rate 1ms")
	var created struct {
		Session struct {
			ID        string `json:"id"`
			Agent     string `json:"agent"`
			Simulated bool   `json:"simulated"`
		} `json:"session"`
		Turn wireTurn `json:"turn"`
	}
	if code := p.call(t, http.MethodPost, "/sessions", map[string]any{
		"clientSubmitId": "proc-1", "content": map[string]any{"text": "/sim words=12 tool"},
	}, &created); code != http.StatusCreated {
		t.Fatalf("session.create: %d; stderr:\n%s", code, p.stderr)
	}
	if created.Session.Agent != sim.Name || !created.Session.Simulated {
		t.Fatalf("the sim agent run as a process is still labelled simulated: %+v", created.Session)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if tr := p.turn(t, created.Session.ID); tr.Outcome == "completed" {
			break
		} else if tr.Phase == "settled" || time.Now().After(deadline) {
			t.Fatalf("turn through the agent process: %+v; stderr:\n%s", tr, p.stderr)
		}
	}
	if words := agentWords(p.messages(t, created.Session.ID)); words < 12 {
		t.Fatalf("the agent process streamed %d words, want >= 12", words)
	}
}

// The sim agent keeps its sessions on disk like a real ACP agent: after
// `ensemble serve` is killed and restarted on the same data dir, a prompt
// in an old session loads the agent session and runs — no context_lost,
// no click needed. Both the default (in-process) sim and `sim-agent
// --state-dir` as the agent process.
func TestRestartKeepsSimSessions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra func(dataDir string) []string
	}{
		{"embedded", func(string) []string { return nil }},
		{"process", func(dataDir string) []string {
			return []string{"--agent", ensembleBinary(t) + " sim-agent --rate 1ms --state-dir " + filepath.Join(dataDir, "agent-state")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			p := startServer(t, dataDir, tc.extra(dataDir)...)
			var created struct {
				Session struct {
					ID        string `json:"id"`
					Simulated bool   `json:"simulated"`
				} `json:"session"`
				Turn wireTurn `json:"turn"`
			}
			if code := p.call(t, http.MethodPost, "/sessions", map[string]any{
				"clientSubmitId": "keep-1", "content": map[string]any{"text": "/sim words=3"},
			}, &created); code != http.StatusCreated {
				t.Fatalf("session.create: %d; stderr:\n%s", code, p.stderr)
			}
			sid := created.Session.ID
			if !created.Session.Simulated {
				t.Fatalf("the sim must stay labelled simulated: %+v", created.Session)
			}
			waitCompleted(t, p, sid, created.Turn.ID)
			p.kill()
			<-p.done

			q := startServer(t, dataDir, tc.extra(dataDir)...)
			var next struct {
				Turn  wireTurn `json:"turn"`
				Error struct {
					Code   string `json:"code"`
					Reason string `json:"reason"`
				} `json:"error"`
			}
			if code := q.call(t, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
				"clientSubmitId": "keep-2", "content": map[string]any{"text": "/sim words=4"},
			}, &next); code != http.StatusOK {
				t.Fatalf("submit after restart: %d %+v; stderr:\n%s", code, next.Error, q.stderr)
			}
			waitCompleted(t, q, sid, next.Turn.ID)
			var got struct {
				Session struct {
					ContextLost bool `json:"contextLost"`
				} `json:"session"`
			}
			if q.call(t, http.MethodGet, "/sessions/"+sid, nil, &got); got.Session.ContextLost {
				t.Fatal("the session is marked contextLost after the restart")
			}
			// The agent's replay on load is not recorded again.
			users := 0
			for _, m := range q.messages(t, sid) {
				if m.Role == "user" {
					users++
				}
			}
			if users != 2 {
				t.Fatalf("%d user messages after the restart, want 2", users)
			}
		})
	}
}

func waitCompleted(t *testing.T, p *serverProc, sid, turnID string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		tr := p.turn(t, sid)
		if tr.ID == turnID && tr.Outcome == "completed" {
			return
		}
		if (tr.ID == turnID && tr.Phase == "settled") || time.Now().After(deadline) {
			t.Fatalf("turn %s: %+v; stderr:\n%s", turnID, tr, p.stderr)
		}
	}
}
