package main

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Issue 14 in the browser: Alice deletes a session and it vanishes from
// Bob's list; Undo brings it back; deleted again, Bob restores it from the
// Trash and Alice sees it return; an admin purges it for good while Bob
// has the Trash open, and it goes for him at once. A deleted session's
// notice restores it for members. A viewer gets no Delete button and no
// Restore in the Trash or the notice.
func TestBrowserDeleteTrashRestore(t *testing.T) {
	b := browser(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir, "--sim-rate", "5ms")
	alice := person(t, b, mintLink(t, dataDir, p.addr, "alice", "Alice", "member"))
	bob := person(t, b, mintLink(t, dataDir, p.addr, "bob", "Bob", "member"))
	ada := person(t, b, mintLink(t, dataDir, p.addr, "ada", "Ada", "admin"))
	vic := person(t, b, mintLink(t, dataDir, p.addr, "vic", "Vic", "viewer"))

	do(t, alice, "create a session", chromedp.Click(chromedp.CSS(`#new-session`)),
		chromedp.WaitVisible(chromedp.CSS(`#session-list [data-session-id]`)))
	sid := js[string](t, alice, "session id", `document.querySelector('#session-list [data-session-id]').dataset.sessionId`)
	openSession(t, alice, "Alice", sid)
	send(t, alice, "Alice", "Plan the trash feature")
	waitJS(t, alice, "the turn completes", `document.querySelector('#transcript .turn-status[data-outcome="completed"]')`)
	item := `document.querySelector('#session-list [data-session-id="` + sid + `"]')`
	waitJS(t, bob, "Bob sees the session", item)
	openSession(t, vic, "Vic", sid)
	if js[bool](t, vic, "viewer's delete button", `!document.querySelector('#session-delete').hidden`) {
		t.Fatal("a viewer sees the Delete button")
	}

	// Delete with undo.
	do(t, alice, "Alice deletes", chromedp.WaitVisible(chromedp.CSS(`#session-delete`)), chromedp.Click(chromedp.CSS(`#session-delete`)),
		chromedp.WaitVisible(chromedp.CSS(`#undo-toast`)))
	waitJS(t, bob, "the session vanishes for Bob", `!`+item)
	waitJS(t, vic, "the open session says it was deleted", `/was deleted/.test(document.querySelector('#transcript').textContent)`)
	settle(t, alice)
	screenshot(t, alice, "trash-01-deleted-undo")
	screenshot(t, bob, "trash-02-vanished-for-bob")
	do(t, alice, "Alice undoes", chromedp.Click(chromedp.CSS(`#undo-delete`)))
	waitJS(t, bob, "the session is back for Bob after undo", item)
	waitJS(t, vic, "the open session is live again", `!/was deleted/.test(document.querySelector('#transcript').textContent)`)

	// Deleted again: the deleted-session notice offers Restore to members
	// (not to the viewer), and it is the only write control left: no goal,
	// fork, pin, settings, composer or delete for anyone. Alice restores
	// from it and it is live again for everyone, her controls with it.
	full := `goal,fork,pin,settings,composer,delete`
	// A fresh load: Alice's first ready frame predates the agent, so it
	// could not say the agent forks; this one does.
	do(t, alice, "Alice reloads", chromedp.Reload())
	openSession(t, alice, "Alice", sid)
	waitJS(t, alice, "Alice's write controls before the delete", writeControls+` === '`+full+`'`)
	do(t, alice, "Alice deletes", chromedp.WaitVisible(chromedp.CSS(`#session-delete`)), chromedp.Click(chromedp.CSS(`#session-delete`)))
	waitJS(t, bob, "the session vanishes for Bob", `!`+item)
	notice := `document.querySelector('#transcript .banner-deleted')`
	waitJS(t, alice, "Alice's notice offers Restore", notice+` && !document.querySelector('#restore-deleted').hidden`)
	waitJS(t, vic, "Vic's notice has no Restore", notice+` && document.querySelector('#restore-deleted').hidden`)
	for _, who := range []struct {
		name string
		ctx  context.Context
	}{{"Alice", alice}, {"Vic", vic}} {
		if got := js[string](t, who.ctx, who.name+"'s write controls on the deleted session", writeControls); got != "" {
			t.Fatalf("%s still has write controls on a deleted session: %s", who.name, got)
		}
		if js[bool](t, who.ctx, who.name+"'s pin", `!!document.querySelector('#session-pin') && !document.querySelector('#session-pin').hidden`) {
			t.Fatalf("%s sees the pin on a deleted session", who.name)
		}
	}
	js[bool](t, alice, "hide the undo toast for the screenshot", `document.querySelector('#undo-toast').hidden = true`)
	settle(t, alice)
	screenshot(t, alice, "trash-06-deleted-notice-restore")
	screenshot(t, vic, "trash-07-deleted-notice-viewer")
	do(t, alice, "Alice restores from the notice", chromedp.Click(chromedp.CSS(`#restore-deleted`)))
	waitJS(t, bob, "the session is back for Bob", item)
	waitJS(t, vic, "Vic's notice clears", `!`+notice)
	waitJS(t, alice, "Alice's notice clears", `!`+notice)
	waitJS(t, alice, "Alice's write controls come back with the restore", writeControls+` === '`+full+`'`)

	// Deleted again; Bob restores it from the Trash.
	do(t, alice, "Alice deletes again", chromedp.WaitVisible(chromedp.CSS(`#session-delete`)), chromedp.Click(chromedp.CSS(`#session-delete`)))
	waitJS(t, bob, "the session vanishes for Bob again", `!`+item)
	row := `document.querySelector('#trash-list [data-trash-id="` + sid + `"]')`
	do(t, bob, "Bob opens the Trash", chromedp.Click(chromedp.CSS(`#trash-open`)))
	waitJS(t, bob, "the Trash lists it", row+` && /Deleted .* by Alice/.test(`+row+`.textContent)`)
	if js[bool](t, bob, "member purge button", `!`+row+`.querySelector('[data-action="purge"]').hidden`) {
		t.Fatal("a member sees Purge")
	}
	do(t, vic, "Vic opens the Trash", chromedp.Click(chromedp.CSS(`#trash-open`)))
	waitJS(t, vic, "Vic's Trash lists it without Restore", row+` && `+row+`.querySelector('[data-action="restore"]').hidden`)
	settle(t, bob)
	screenshot(t, bob, "trash-03-trash-view")
	do(t, bob, "Bob restores", chromedp.Click(chromedp.CSS(`#trash-list [data-trash-id="`+sid+`"] [data-action="restore"]`)))
	waitJS(t, alice, "Alice sees it return", item)
	waitJS(t, bob, "it leaves Bob's Trash", `!`+row+` && !document.querySelector('#trash-empty').hidden`)
	waitJS(t, vic, "it leaves Vic's open Trash live", `!`+row)
	screenshot(t, alice, "trash-04-restored")
	do(t, bob, "Bob closes the Trash", chromedp.Click(chromedp.CSS(`#trash-close`)))
	openSession(t, bob, "Bob", sid)
	waitJS(t, bob, "the restored transcript is whole", `/Plan the trash feature/.test(document.querySelector('#transcript').textContent)`)

	// An admin purges it for good (two clicks).
	do(t, alice, "Alice deletes a third time", chromedp.WaitVisible(chromedp.CSS(`#session-delete`)), chromedp.Click(chromedp.CSS(`#session-delete`)))
	do(t, ada, "Ada opens the Trash", chromedp.Click(chromedp.CSS(`#trash-open`)))
	// Bob keeps the Trash open while Ada purges: it goes for him live.
	do(t, bob, "Bob opens the Trash again", chromedp.Click(chromedp.CSS(`#trash-open`)))
	waitJS(t, bob, "Bob's Trash lists it", row)
	purge := `#trash-list [data-trash-id="` + sid + `"] [data-action="purge"]`
	do(t, ada, "Ada arms purge", chromedp.WaitVisible(chromedp.CSS(purge)), chromedp.Click(chromedp.CSS(purge)))
	waitJS(t, ada, "purge asks to confirm", `document.querySelector('`+purge+`').textContent === 'Purge for good?'`)
	settle(t, ada)
	screenshot(t, ada, "trash-05-purge-confirm")
	do(t, ada, "Ada purges", chromedp.Click(chromedp.CSS(purge)))
	purged := time.Now()
	waitJS(t, ada, "the Trash is empty", `!`+row+` && !document.querySelector('#trash-empty').hidden`)
	waitJS(t, bob, "it leaves Bob's open Trash", `!`+row+` && !document.querySelector('#trash-empty').hidden`)
	// An open Trash used to reread every 10 s; trash_changed makes it live.
	if d := time.Since(purged); d > 3*time.Second {
		t.Fatalf("the purge reached Bob's open Trash after %v", d)
	}
	waitJS(t, bob, "Bob's open session says it was purged, with no Restore",
		`/purged for good/.test(`+notice+`.textContent) && document.querySelector('#restore-deleted').hidden`)
	waitJS(t, bob, "Bob's composer no longer offers a restore",
		`document.querySelector('#composer-input').placeholder === 'This session was purged for good.'`)
	screenshot(t, bob, "trash-08-purged-live-for-bob")
	if code := p.call(t, "POST", "/sessions/"+sid+"/restore", map[string]any{}, nil); code != 404 {
		t.Fatalf("restore after purge: %d, want 404", code)
	}
}

// writeControls lists the write controls the open session offers now,
// visible and enabled, in a fixed order (the Restore notice is not one).
const writeControls = `(() => {
  const q = (s) => document.querySelector(s);
  const on = (el) => !!el && !el.hidden && !el.disabled && el.offsetParent !== null;
  const out = [];
  if (on(q('#goal-bar .goal-set'))) out.push('goal');
  if ([...document.querySelectorAll('#transcript .turn-fork')].some(on)) out.push('fork');
  if (on(q('#session-pin'))) out.push('pin');
  if (on(q('#session-settings-btn'))) out.push('settings');
  if (on(q('#composer-input'))) out.push('composer');
  if (on(q('#session-delete'))) out.push('delete');
  return out.join(',');
})()`

// settle lets CSS transitions (.12 s on buttons) finish before a screenshot.
func settle(t *testing.T, ctx context.Context) {
	t.Helper()
	do(t, ctx, "let transitions finish", chromedp.Sleep(400*time.Millisecond))
}
