import test from 'node:test';
import assert from 'node:assert/strict';
import { presenceList, mergePresence, presenceSummary, createTypingSignal } from './presence.js';
import { checkPrompt, MAX_PROMPT_BYTES, formatBytes } from './limits.js';
import { ERROR_CODES, explainError, errorLine, FAILURE_REASONS, explainFailure, explainDisconnect } from './explain.js';

test('presence merge: one entry per person, earliest since, typing if any', () => {
  const r1 = { watchers: [{ userId: 'a', name: 'Alice', since: '2025-01-01T00:00:05Z', replicas: ['r1'] }] };
  const r2 = [{ userId: 'a', name: 'Alice', since: '2025-01-01T00:00:01Z', typing: true, replicas: ['r2'] },
    { userId: 'b', name: 'Bob', since: '2025-01-01T00:00:03Z', replicas: ['r2'] }];
  const m = mergePresence(r1, r2);
  assert.deepEqual(m.map((w) => w.userId), ['a', 'b']);
  assert.equal(m[0].since, '2025-01-01T00:00:01Z');
  assert.equal(m[0].typing, true);
  assert.deepEqual(m[0].replicas.sort(), ['r1', 'r2']);
  assert.deepEqual(presenceList({ watchers: [{ userId: 'a' }, { userId: 'a' }, {}] }).map((w) => w.name), ['a']);
});

test('presence summary: N watching and who types, never yourself', () => {
  const w = [{ userId: 'me', name: 'Me', typing: true }, { userId: 'a', name: 'Alice', typing: true }, { userId: 'b', name: 'Bob' }];
  const s = presenceSummary(w, 'me');
  assert.equal(s.watching, '3 watching');
  assert.equal(s.typing, 'Alice is typing…');
  assert.deepEqual(s.others.map((x) => x.name), ['Alice', 'Bob']);
  assert.equal(presenceSummary([{ userId: 'me' }], 'me').watching, '');
  assert.equal(presenceSummary([{ userId: 'a', name: 'A', typing: true }, { userId: 'b', name: 'B', typing: true }], 'me').typing, 'A and B are typing…');
});

test('typing signal is rate limited and stops once', () => {
  let t = 0;
  const sent = [];
  let pending = null;
  const sig = createTypingSignal((v) => sent.push(v), { every: 3000, idle: 4000, now: () => t,
    setTimer: (fn) => { pending = fn; return 1; }, clearTimer: () => { pending = null; } });
  sig.keystroke();
  t = 1000; sig.keystroke();
  t = 2000; sig.keystroke();
  assert.deepEqual(sent, [true]);
  t = 3500; sig.keystroke();
  assert.deepEqual(sent, [true, true]);
  pending();
  assert.deepEqual(sent, [true, true, false]);
  sig.stop();
  assert.deepEqual(sent, [true, true, false], 'stopping twice says nothing');
});

test('size checks: over the limit is refused with the reason; big prompts go over HTTP', () => {
  assert.deepEqual(checkPrompt('hello'), { ok: true, bytes: 5, viaHttp: false, error: '' });
  const big = 'x'.repeat(100 * 1024);
  const c = checkPrompt(big);
  assert.equal(c.ok, true);
  assert.equal(c.viaHttp, true, 'a 100 KiB prompt does not fit a 64 KiB frame');
  const tooBig = 'é'.repeat(MAX_PROMPT_BYTES / 2 + 1); // 2 bytes each in UTF-8
  const r = checkPrompt(tooBig);
  assert.equal(r.ok, false);
  assert.match(r.error, /256 KiB/);
  // JSON escaping counts toward the frame: quotes and newlines double.
  assert.equal(checkPrompt('"\n'.repeat(16 * 1024)).viaHttp, true);
  assert.equal(formatBytes(1536), '1.5 KiB');
});

test('every error code and failure reason has a sentence and a next step', () => {
  for (const code of ERROR_CODES) {
    const e = explainError({ code, message: 'm' });
    assert.ok(e.text && e.next, code);
    assert.ok(!e.text.includes(code), `${code} is explained, not echoed`);
  }
  for (const r of FAILURE_REASONS) {
    const f = explainFailure(r);
    assert.ok(f.text && f.next && !f.text.includes(r), r);
  }
  assert.match(errorLine({ code: 'session_busy', message: 'a turn is running' }), /still working.*Stop.*a turn is running/);
  assert.match(explainError({ code: 'unavailable', reason: 'connection_lost' }).text, /connection dropped/);
  assert.match(explainDisconnect({ reason: 'server shutting down' }), /restarting/);
  assert.match(explainDisconnect({ reason: '' }), /Live updates paused — reconnecting/);
});
