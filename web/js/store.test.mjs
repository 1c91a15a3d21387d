import test from 'node:test';
import assert from 'node:assert/strict';
import * as S from './store.js';

const msg = (id, ordinal, extra = {}) => ({ id, sessionId: 's1', turnId: 't1', role: 'agent', kind: 'text', version: ordinal, ordinal, content: { text: '' }, ...extra });

function openState() {
  const st = S.createState();
  S.openSession(st, 's1');
  S.applySessionSnapshot(st, {
    session: { id: 's1', title: 'T', activeTurnId: 't1', updatedAt: '2025-01-01T00:00:00Z' },
    turns: [{ id: 't1', sessionId: 's1', phase: 'durably_accepted', clientSubmitId: 'c1' }],
    messages: [msg('t1.prompt', 1, { role: 'user', content: { text: 'hi' } })],
  });
  return st;
}

test('workspace snapshot and summaries', () => {
  const st = S.createState();
  S.applyWorkspaceSnapshot(st, { sessions: [{ id: 'a', updatedAt: '2025-01-01T00:00:00Z' }, { id: 'b', updatedAt: '2025-01-02T00:00:00Z' }] });
  assert.deepEqual(S.sortedSessions(st).map((s) => s.id), ['b', 'a']);
  S.applyWorkspaceEvent(st, 'session_summary', { session: { id: 'a', updatedAt: '2025-01-03T00:00:00Z' } });
  assert.deepEqual(S.sortedSessions(st).map((s) => s.id), ['a', 'b']);
  // a stale summary does not move back
  S.applyWorkspaceEvent(st, 'session_summary', { session: { id: 'a', title: 'old', updatedAt: '2025-01-01T00:00:00Z' } });
  assert.equal(st.sessions.get('a').title, undefined);
  S.applyWorkspaceEvent(st, 'session_summary', { session: { id: 'b', deletedAt: '2025-01-04T00:00:00Z', updatedAt: '2025-01-04T00:00:00Z' } });
  assert.deepEqual([...st.sessions.keys()], ['a']);
});

// The server trims trailing zeros of a timestamp's fraction, so a newer
// summary can sort below an older one as text ("…01.512Z" < "…01.5Z").
test('summaries compare instants, not their text', () => {
  const st = S.createState();
  S.openSession(st, 'a');
  S.applyWorkspaceSnapshot(st, { sessions: [{ id: 'a', pinned: false, updatedAt: '2026-12-04T13:40:01.5Z' }] });
  S.applyWorkspaceEvent(st, 'session_summary', { session: { id: 'a', pinned: true, updatedAt: '2026-12-04T13:40:01.512Z' } });
  assert.equal(st.sessions.get('a').pinned, true);
  assert.equal(st.open.session.pinned, true);
  S.applyWorkspaceEvent(st, 'session_summary', { session: { id: 'a', pinned: false, updatedAt: '2026-12-04T13:40:01Z' } });
  assert.equal(st.sessions.get('a').pinned, true, 'an older summary (a whole second) must not win');
  assert.equal(S.compareInstants('2026-12-04T13:40:01Z', '2026-12-04T13:40:01.000Z'), 0);
  assert.equal(S.compareInstants('2026-12-04T13:40:01.9Z', '2026-12-04T13:40:02Z'), -1);
  assert.equal(S.compareInstants('2026-12-04T14:40:01+01:00', '2026-12-04T13:40:01.5Z'), -1);
  // Sessions and interactions sort by instant too.
  S.applyWorkspaceSnapshot(st, { sessions: [
    { id: 'x', updatedAt: '2026-12-04T13:40:01.5Z' }, { id: 'y', updatedAt: '2026-12-04T13:40:01.512Z' }] });
  assert.deepEqual(S.sortedSessions(st).map((s) => s.id), ['y', 'x']);
});

test('deltas stream, then message_update replaces', () => {
  const st = openState();
  assert.equal(S.applyMessageDelta(st.open, { sessionId: 's1', turnId: 't1', messageId: 'm', offset: 0, text: 'Hel' }), 'applied');
  S.applySessionEvent(st, 'message_delta', { sessionId: 's1', turnId: 't1', messageId: 'm', offset: 3, text: 'lo' });
  let m = st.open.messages.get('m');
  assert.equal(S.messageText(m), 'Hello');
  assert.equal(S.sortedMessages(st.open).at(-1).id, 'm');
  // duplicate and overlapping deltas are harmless
  assert.equal(S.applyMessageDelta(st.open, { messageId: 'm', offset: 0, text: 'Hel' }), 'stale');
  assert.equal(S.applyMessageDelta(st.open, { messageId: 'm', offset: 3, text: 'lo, w' }), 'applied');
  assert.equal(S.messageText(st.open.messages.get('m')), 'Hello, w');
  // gap: not applied
  assert.equal(S.applyMessageDelta(st.open, { messageId: 'm', offset: 99, text: 'x' }), 'gap');
  // committed update behind the live text keeps the live text while streaming
  S.applySessionEvent(st, 'message_update', { message: msg('m', 2, { content: { text: 'Hello' }, streaming: true }) });
  assert.equal(S.messageText(st.open.messages.get('m')), 'Hello, w');
  // final update wins
  S.applySessionEvent(st, 'message_update', { message: msg('m', 2, { version: 5, content: { text: 'Hello, world' }, streaming: false }) });
  m = st.open.messages.get('m');
  assert.equal(S.messageText(m), 'Hello, world');
  assert.equal(m.placeholder, undefined);
  // an older version never replaces a newer one
  S.applySessionEvent(st, 'message_update', { message: msg('m', 2, { version: 3, content: { text: 'Hel' } }) });
  assert.equal(S.messageText(st.open.messages.get('m')), 'Hello, world');
});

test('a done delta ends streaming with the text it completes (ensemble.v2)', () => {
  const st = openState();
  S.applySessionEvent(st, 'message_update', { message: msg('m', 2, { version: 4, content: { text: 'Hel' }, streaming: true }) });
  S.applySessionEvent(st, 'message_delta', { sessionId: 's1', messageId: 'm', offset: 3, text: 'lo', version: 5 });
  assert.equal(S.applySessionEvent(st, 'message_delta', { sessionId: 's1', messageId: 'm', offset: 5, text: '!', version: 6, done: true }), true);
  let m = st.open.messages.get('m');
  assert.equal(m.streaming, false);
  assert.equal(m.content.text, 'Hello!');
  assert.equal(m.streamedText, undefined);
  assert.equal(m.version, 6);
  assert.equal(st.open.resync, undefined);
  // a done delta with no new words still ends it
  S.applySessionEvent(st, 'message_update', { message: msg('n', 3, { version: 7, content: { text: 'Hi' }, streaming: true }) });
  assert.equal(S.applyMessageDelta(st.open, { messageId: 'n', offset: 2, text: '', version: 8, done: true }), 'stale');
  m = st.open.messages.get('n');
  assert.equal(m.streaming, false);
  assert.equal(S.messageText(m), 'Hi');
  // one that ends a message whose text the client is missing asks for a resync
  S.applySessionEvent(st, 'message_update', { message: msg('g', 4, { version: 9, content: { text: 'ab' }, streaming: true }) });
  assert.equal(S.applyMessageDelta(st.open, { messageId: 'g', offset: 7, text: 'z', version: 10, done: true }), 'gap');
  assert.equal(st.open.messages.get('g').streaming, true);
  assert.equal(st.open.resync, true);
  // so does one that ends a message the client never saw begin
  st.open.resync = false;
  assert.equal(S.applyMessageDelta(st.open, { messageId: 'unseen', offset: 4, text: '.', version: 11, done: true }), 'gap');
  assert.equal(st.open.resync, true);
});

test('utf-8 byte offsets', () => {
  assert.equal(S.utf8Length('héllo'), 6);
  assert.equal(S.utf8Length('a😀'), 5);
  assert.equal(S.utf8Index('a😀b', 5), 3);
  assert.equal(S.utf8Index('a😀b', 2), -1);
  assert.deepEqual(S.applyDelta('héllo', 6, ' wörld', 'utf8'), { text: 'héllo wörld', status: 'applied' });
  assert.deepEqual(S.applyDelta('héllo', 5, ' w', 'utf16'), { text: 'héllo w', status: 'applied' });
});

test('messages sort by ordinal', () => {
  const st = openState();
  S.putMessage(st.open, msg('c', 7));
  S.putMessage(st.open, msg('b', 3));
  assert.deepEqual(S.sortedMessages(st.open).map((m) => m.id), ['t1.prompt', 'b', 'c']);
});

test('turn status and phase monotonicity', () => {
  const st = openState();
  assert.equal(S.turnStatus(st.open.turns.get('t1')).label, 'agent is working…');
  S.applySessionEvent(st, 'turn_update', { turn: { id: 't1', sessionId: 's1', phase: 'settled', outcome: 'failed', failureReason: 'provider_error' } });
  S.applySessionEvent(st, 'turn_update', { turn: { id: 't1', sessionId: 's1', phase: 'dispatched' } });
  const t = st.open.turns.get('t1');
  assert.equal(t.phase, 'settled');
  assert.equal(S.turnStatus(t).label, 'failed');
  assert.match(S.turnStatus(t).detail, /agent reported an error.*Retry this prompt/);
  assert.equal(S.turnStatus({ phase: 'queued' }).label, 'sending…');
  assert.equal(S.turnStatus({ phase: 'settled', outcome: 'canceled' }).label, 'stopped');
  assert.equal(S.turnStatus({ phase: 'settled', outcome: 'canceled', canceledBy: 'bob', canceledByName: 'Bob' }).label, 'Stopped by Bob');
  assert.equal(S.turnStatus({ phase: 'settled', outcome: 'canceled', canceledBy: 'me', canceledByName: 'Me' }, { meId: 'me' }).label, 'Stopped by you');
  // A graceful restart is explained as one, not as a crash.
  const restart = S.turnStatus({ phase: 'settled', outcome: 'failed', failureReason: 'execution_status_unknown', stopReason: 'server_shutdown' });
  assert.match(restart.detail, /planned restart/);
  assert.doesNotMatch(S.turnStatus({ phase: 'settled', outcome: 'failed', failureReason: 'execution_status_unknown' }).detail, /restart/);
  // Offline, a running turn is not claimed to be working.
  const off = S.turnStatus({ phase: 'durably_accepted' }, { offline: true });
  assert.equal(off.active, false);
  assert.match(off.label, /unknown while offline/);
  assert.equal(S.turnStatus({ phase: 'settled', outcome: 'completed' }).label, 'completed');
});

test('active turn follows the session', () => {
  const st = openState();
  assert.equal(S.activeTurn(st.open).id, 't1');
  S.applySessionEvent(st, 'session_summary', { session: { id: 's1', updatedAt: '2025-01-01T00:00:01Z' } });
  S.applySessionEvent(st, 'turn_update', { turn: { id: 't1', sessionId: 's1', phase: 'settled', outcome: 'completed' } });
  assert.equal(S.activeTurn(st.open), null);
});

test('pending submissions disappear once reflected', () => {
  const st = openState();
  st.pending.set('c2', { clientSubmitId: 'c2', sessionId: 's1', text: 'next', createdAt: 1, status: 'sending' });
  assert.equal(S.visiblePending(st, 's1').length, 1);
  S.applySessionEvent(st, 'turn_update', { turn: { id: 't2', sessionId: 's1', phase: 'queued', clientSubmitId: 'c2' } });
  assert.equal(S.visiblePending(st, 's1').length, 1); // no user message yet
  S.applySessionEvent(st, 'message_update', { message: msg('t2.prompt', 9, { turnId: 't2', role: 'user', content: { text: 'next' } }) });
  assert.equal(S.visiblePending(st, 's1').length, 0);
});

test('interaction snapshots replace per root turn; empty clears only that root', () => {
  const st = openState();
  S.applySessionEvent(st, 'interaction_snapshot', { rootSessionId: 's1', turnId: 't1', interactions: [{ requestId: 'r1', turnId: 't1', state: 'pending' }] });
  assert.equal(S.pendingInteractions(st.open).length, 1);
  // A sub-agent's interaction is listed under the root turn, not its own.
  S.applySessionEvent(st, 'interaction_snapshot', { rootSessionId: 's1', turnId: 't2', interactions: [{ requestId: 'c1', sessionId: 'child', turnId: 'ct1', state: 'pending' }] });
  assert.equal(S.pendingInteractions(st.open).length, 2);
  assert.equal(st.open.interactions.get('t2')[0].requestId, 'c1');
  S.applySessionEvent(st, 'interaction_snapshot', { rootSessionId: 's1', turnId: 't1', interactions: [] });
  assert.equal(S.pendingInteractions(st.open).length, 1);
  assert.ok(!st.open.interactions.has('t1'));
  // A settled root turn's pending rows are not actionable.
  st.open.turns.set('t2', { id: 't2', phase: 'settled', outcome: 'completed' });
  assert.equal(S.pendingInteractions(st.open).length, 0);
});

test('session snapshot carries the interaction tree', () => {
  const st = openState();
  S.applySessionSnapshot(st, { session: { id: 's1' }, turns: [], messages: [],
    interactionTree: { rootSessionId: 's1', turnId: 't9', interactions: [{ requestId: 'r', turnId: 't9', state: 'answered', answeredByName: 'Bob', response: { optionId: 'allow' }, options: [{ optionId: 'allow', name: 'Allow' }], resolution: 'delivered' }] } });
  const [i] = st.open.interactions.get('t9');
  assert.equal(S.interactionStatus(i, false).text, 'Answered by Bob: “Allow” — the agent has it.');
});

test('a superseded answer is explained, not an error', () => {
  const res = { disposition: 'superseded', interaction: { answeredByName: 'Alice', response: { optionId: 'reject' }, options: [{ optionId: 'reject', name: 'Skip' }] } };
  assert.equal(S.respondNote(res, 'allow'), 'Alice answered first (Skip); your answer was not used.');
  assert.equal(S.respondNote({ disposition: 'answered' }, 'allow'), '');
  const gone = { state: 'superseded', response: { optionId: 'allow' }, answeredByName: 'Al', resolution: 'provider_gone', options: [] };
  assert.match(S.interactionStatus(gone, true).text, /already stopped waiting/);
});

test('fenced code splitting', () => {
  assert.deepEqual(S.splitFences('plain'), [{ type: 'text', text: 'plain', lang: '' }]);
  const parts = S.splitFences('Here:\n```go\nfmt.Println(1)\n```\nDone.');
  assert.deepEqual(parts.map((p) => p.type), ['text', 'code', 'text']);
  assert.equal(parts[1].lang, 'go');
  assert.equal(parts[1].text, 'fmt.Println(1)');
  // unclosed fence while streaming
  const open = S.splitFences('x\n```\npartial');
  assert.deepEqual(open.map((p) => p.type), ['text', 'code']);
});

test('relative time', () => {
  const now = Date.parse('2025-01-10T12:00:00Z');
  assert.equal(S.relativeTime('2025-01-10T11:59:50Z', now), 'just now');
  assert.equal(S.relativeTime('2025-01-10T11:55:00Z', now), '5 min ago');
  assert.equal(S.relativeTime('2025-01-10T09:00:00Z', now), '3 h ago');
  assert.equal(S.relativeTime('2025-01-09T10:00:00Z', now), 'yesterday');
});

test('interaction history survives the live tree moving on', () => {
  const st = openState();
  const it = (turnId, requestId, state, at, extra = {}) => ({ sessionId: 's1', turnId, requestId, state, createdAt: at, ...extra });
  S.applySessionSnapshot(st, {
    session: { id: 's1', activeTurnId: 't2' },
    turns: [{ id: 't2', sessionId: 's1', phase: 'durably_accepted' }, { id: 't1', sessionId: 's1', phase: 'settled', outcome: 'completed' }],
    messages: [],
    interactionTree: { turnId: 't2', interactions: [it('t2', 'r3', 'pending', '2025-01-01T00:00:03Z')] },
    interactions: [
      it('t1', 'r2', 'superseded', '2025-01-01T00:00:02Z', { resolution: 'withdrawn' }),
      it('t1', 'r1', 'answered', '2025-01-01T00:00:01Z', { answeredBy: 'alice', answeredByName: 'Alice', response: { optionId: 'allow' }, resolution: 'delivered' }),
      it('t2', 'r3', 'pending', '2025-01-01T00:00:03Z'),
    ],
  });
  assert.deepEqual(S.turnInteractions(st.open, 't1').map((i) => i.requestId), ['r1', 'r2'], 'in the order asked');
  assert.match(S.interactionStatus(S.turnInteractions(st.open, 't1')[0], true).text, /Answered by Alice/);
  // The live tree answers r3: it wins over the history's pending copy.
  S.applySessionEvent(st, 'interaction_snapshot', { turnId: 't2', interactions: [it('t2', 'r3', 'answered', '2025-01-01T00:00:03Z', { answeredByName: 'Bob' })] });
  assert.equal(S.turnInteractions(st.open, 't2')[0].state, 'answered');
  // A new turn empties the live tree for t3; t1's and t2's history stays.
  S.applySessionEvent(st, 'interaction_snapshot', { turnId: 't3', interactions: [] });
  assert.equal(S.turnInteractions(st.open, 't1').length, 2);
  // Paging older turns brings their history too.
  S.addTurns(st, { turns: [{ id: 't0', sessionId: 's1', phase: 'settled' }], interactions: [it('t0', 'r0', 'canceled', '2025-01-01T00:00:00Z')] });
  assert.equal(S.turnInteractions(st.open, 't0')[0].state, 'canceled');
});

test('names come from the turn, never a raw id when a name is known', () => {
  const names = new Map([['carol', 'Carol']]);
  assert.equal(S.authorLabel({ author: 'alice', authorName: 'Alice' }, null, names), 'Alice');
  assert.equal(S.authorLabel({ author: 'bob' }, { submittedByName: 'Bob' }, names), 'Bob');
  assert.equal(S.authorLabel({ author: 'carol' }, {}, names), 'Carol');
  assert.equal(S.authorLabel({ author: 'dave' }, {}, names), 'dave');
  // Labels come from the turn that ran, not the session's creation.
  const session = { agent: 'Ensemble sim agent', simulated: true };
  assert.deepEqual(S.agentLabel({ agent: { name: 'acp-example-agent', version: '0.1', simulated: false } }, session),
    { name: 'acp-example-agent', version: '0.1', simulated: false });
  assert.deepEqual(S.agentLabel({}, session), { name: 'Ensemble sim agent', version: '', simulated: true });
});

test('presence events replace the list; other sessions are ignored', () => {
  const st = openState();
  S.applySessionEvent(st, 'presence', { sessionId: 's1', watchers: [{ userId: 'a', name: 'Alice', typing: true }, { userId: 'b', name: 'Bob' }] });
  assert.deepEqual(st.open.presence.map((w) => w.name), ['Alice', 'Bob']);
  assert.equal(S.applySessionEvent(st, 'presence', { sessionId: 'other', watchers: [] }), false);
  assert.equal(st.open.presence.length, 2);
  S.applySessionSnapshot(st, { session: { id: 's1' }, turns: [], messages: [], presence: { sessionId: 's1', watchers: [{ userId: 'b', name: 'Bob' }] } });
  assert.deepEqual(st.open.presence.map((w) => w.name), ['Bob']);
});

test('workspace presence says who watches which session', () => {
  const st = S.createState();
  S.applyWorkspaceSnapshot(st, { sessions: [{ id: 'a' }, { id: 'b' }], presence: { watchers: [{ userId: 'u1', name: 'Ann', sessions: ['a'] }] } });
  assert.deepEqual(S.watchersOf(st, 'a').map((w) => w.name), ['Ann']);
  assert.equal(S.applyWorkspaceEvent(st, 'presence', { watchers: [{ userId: 'u1', name: 'Ann', sessions: ['b'] }, { userId: 'u2', name: 'Bo', sessions: ['b'] }] }), true);
  assert.equal(S.watchersOf(st, 'a').length, 0);
  assert.deepEqual(S.watchersOf(st, 'b').map((w) => w.name), ['Ann', 'Bo']);
});

test('queue events: a newer revision replaces, an older one never does, another session is ignored', () => {
  const st = openState();
  const entry = (id) => ({ id, author: 'bob', disposition: 'followup', state: 'queued', content: { text: id } });
  assert.equal(S.applySessionEvent(st, 'queue', { sessionId: 's1', revision: 2, entries: [entry('a'), entry('b')] }), true);
  assert.deepEqual(st.open.queue.entries.map((e) => e.id), ['a', 'b']);
  assert.equal(S.applySessionEvent(st, 'queue', { sessionId: 's1', revision: 1, entries: [entry('a')] }), false);
  assert.deepEqual(st.open.queue.entries.map((e) => e.id), ['a', 'b']);
  assert.equal(S.applySessionEvent(st, 'queue', { sessionId: 'other', revision: 9, entries: [] }), false);
  assert.equal(S.applySessionEvent(st, 'queue', { sessionId: 's1', revision: 3, entries: [entry('b')] }), true);
  assert.deepEqual(st.open.queue.entries.map((e) => e.id), ['b']);
});

test('trash_changed purging the open deleted session marks it purged', () => {
  const st = openState();
  assert.equal(S.applyWorkspaceEvent(st, 'session_removed', { workspace: 'w', sessionId: 's1' }), true);
  assert.equal(st.open.deleted, true);
  assert.equal(st.open.purged, false);
  assert.equal(S.applyWorkspaceEvent(st, 'trash_changed', { workspace: 'w', deleted: [], restored: [], purged: ['other'] }), false);
  assert.equal(st.open.purged, false);
  assert.equal(S.applyWorkspaceEvent(st, 'trash_changed', { workspace: 'w', deleted: [], restored: [], purged: ['s1'] }), true);
  assert.equal(st.open.purged, true);
});
