package main

import (
	"net/http"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
)

// After a restart in which the agent lost a session (here the sim's state
// file is deleted; real agents lose sessions when their own state goes)
// the agent no longer knows it: the GUI
// says so (contextLost) instead of the server starting over silently, and
// the member's click on "Continue in a fresh agent session" sends the
// queued prompt, which completes (issue 11).
func TestBrowserContextLostAndContinueFresh(t *testing.T) {
	b := browser(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir)
	var created struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
		Turn wireTurn `json:"turn"`
	}
	if code := p.call(t, http.MethodPost, "/sessions", map[string]any{
		"clientSubmitId": "cl-ui-1", "content": map[string]any{"text": "/sim words=3"},
	}, &created); code != http.StatusCreated {
		t.Fatalf("session.create: %d", code)
	}
	sid := created.Session.ID
	p.kill()
	<-p.done
	if err := os.RemoveAll(simStateDir(dataDir)); err != nil {
		t.Fatal(err)
	}

	q := startServer(t, dataDir)
	var refused struct {
		Error struct {
			Reason string `json:"reason"`
		} `json:"error"`
	}
	if code := q.call(t, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
		"clientSubmitId": "cl-ui-2", "content": map[string]any{"text": "/sim words=4"},
	}, &refused); code != http.StatusConflict || refused.Error.Reason != "context_lost" {
		t.Fatalf("submit after restart: %d %+v", code, refused)
	}

	ui := tab(t, b, q.link)
	sel := `#session-list [data-session-id="` + sid + `"]`
	do(t, ui, "open the session and see that its agent context is lost",
		chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)),
		chromedp.WaitVisible(chromedp.CSS(`#context-lost`)))
	do(t, ui, "continue in a fresh agent session",
		chromedp.Click(chromedp.CSS(`#continue-fresh`)),
		chromedp.WaitNotVisible(chromedp.CSS(`#context-lost`)))
	id := waitOutcome(t, ui, "the session", "completed")
	if text := agentTextIn(t, ui, id); text == "" {
		t.Fatal("the queued prompt was answered, but no answer is shown")
	}
}
