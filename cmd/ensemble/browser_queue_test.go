package main

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// queueEntries is the queue above the composer as "author|state|text" rows.
const queueEntries = `[...document.querySelectorAll('#queue .queue-entry')].map(e =>
	[e.querySelector('.queue-author').textContent, e.querySelector('.queue-state').textContent, e.querySelector('.queue-text').textContent].join('|')).join('\n')`

// TestBrowserQueueWhileTheAgentWorks (issue 12): two members watch one
// session. While the agent works, Bob's messages queue visibly for both
// (author, "queued"); Alice cannot retract them, Bob can (×); "Steer now"
// sends one into the running turn; Esc interrupts, and the remaining
// follow-up starts by itself as the next turn.
func TestBrowserQueueWhileTheAgentWorks(t *testing.T) {
	b := browser(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir, "--sim-rate", "5ms")
	alice := person(t, b, mintLink(t, dataDir, p.addr, "alice", "Alice", "member"))
	bob := person(t, b, mintLink(t, dataDir, p.addr, "bob", "Bob", "member"))

	do(t, alice, "create a session", chromedp.Click(chromedp.CSS(`#new-session`)),
		chromedp.WaitVisible(chromedp.CSS(`#session-list [data-session-id]`)))
	sid := js[string](t, alice, "session id", `document.querySelector('#session-list [data-session-id]').dataset.sessionId`)
	openSession(t, bob, "Bob", sid)

	send(t, alice, "Alice", "/sim hang")
	do(t, bob, "Bob sees the agent working", chromedp.WaitVisible(chromedp.CSS(`#stop`)))
	waitJS(t, bob, "the hang turn has started", `/Now hanging/.test(document.querySelector('#transcript').textContent)`)
	send(t, bob, "Bob", "please also update the changelog")
	send(t, bob, "Bob", "/sim words=3 then run the tests")
	send(t, bob, "Bob", "never mind this one")
	want := "Bob|queued|please also update the changelog\nBob|queued|/sim words=3 then run the tests\nBob|queued|never mind this one"
	waitJS(t, alice, "Alice sees Bob's three queued messages", queueEntries+` === `+quoteJS(want))
	waitJS(t, bob, "Bob sees his three queued messages", queueEntries+` === `+quoteJS(want))
	if got := js[string](t, bob, "Bob's box is empty again", `document.querySelector('#composer textarea').value`); got != "" {
		t.Fatalf("a queued message stayed in the box: %q", got)
	}
	// Only the author (or an admin) gets the controls.
	if n := js[int](t, alice, "Alice's retract buttons", `[...document.querySelectorAll('#queue .queue-retract')].filter(b => !b.hidden).length`); n != 0 {
		t.Fatalf("Alice (member, not the author) can retract %d of Bob's entries", n)
	}
	if n := js[int](t, bob, "Bob's retract buttons", `[...document.querySelectorAll('#queue .queue-retract')].filter(b => !b.hidden).length`); n != 3 {
		t.Fatalf("Bob can retract %d of his 3 entries", n)
	}
	screenshot(t, alice, "queue-01-alice-sees-bobs-queue")
	screenshot(t, bob, "queue-02-bob-queued-with-controls")

	// Bob retracts the last one: gone for both.
	do(t, bob, "Bob retracts his last message", chromedp.Click(chromedp.CSS(`#queue .queue-entry:nth-child(3) .queue-retract`)))
	want2 := "Bob|queued|please also update the changelog\nBob|queued|/sim words=3 then run the tests"
	waitJS(t, alice, "Alice sees the retract", queueEntries+` === `+quoteJS(want2))
	// Bob's list too, before he clicks in it: the click lands where the
	// button was when it was found, and the retracted row's removal moves
	// the rows above the composer (a CI run clicked beside "Steer now").
	waitJS(t, bob, "Bob sees the retract", queueEntries+` === `+quoteJS(want2))

	// Steer now: the first goes into the running turn, the agent answers it.
	do(t, bob, "Bob steers his first message now", chromedp.Click(chromedp.CSS(`#queue .queue-entry:nth-child(1) .queue-steer`)))
	waitJS(t, alice, "the agent took the steering", `/Steering from Bob: "please also update the changelog"/.test(document.querySelector('#transcript').textContent)`)
	waitJS(t, alice, "one follow-up left", queueEntries+` === `+quoteJS("Bob|queued|/sim words=3 then run the tests"))
	screenshot(t, alice, "queue-03-steered-one-left")

	// Esc interrupts; the follow-up then runs by itself.
	do(t, alice, "Alice presses Esc", chromedp.Click(chromedp.CSS(`#composer textarea`)), chromedp.KeyEvent("\x1b"))
	waitJS(t, bob, "the interrupted turn says who stopped it", `[...document.querySelectorAll('#transcript .turn-status[data-outcome="canceled"] .turn-label')].some(e => e.textContent === 'Stopped by Alice')`)
	waitJS(t, bob, "the follow-up ran by itself", `document.querySelectorAll('#transcript .turn-status[data-outcome="completed"]').length === 1`)
	waitJS(t, alice, "the queue is empty for Alice", `document.querySelector('#queue').hidden && document.querySelectorAll('#queue .queue-entry').length === 0`)
	transcript := js[string](t, alice, "transcript", `document.querySelector('#transcript').textContent`)
	if strings.Contains(transcript, "never mind this one") {
		t.Fatal("the retracted message ran")
	}
	if !strings.Contains(transcript, "then run the tests") {
		t.Fatal("the follow-up's prompt is not in the transcript")
	}
	screenshot(t, bob, "queue-04-followup-ran")
}

func quoteJS(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
