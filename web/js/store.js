// Client state and the pure reducers that apply server snapshots and events
// to it. No DOM here: node unit tests exercise these functions directly.
//
// Snapshots replace state; events patch it. Every event kind carries a
// complete object (session_summary {session}, turn_update {turn},
// message_update {message}) except message_delta, which appends live text
// at an offset and is superseded by the next message_update.

import { presenceList } from './presence.js';
import { explainFailure } from './explain.js';

// ---------- state ----------

export function createState() {
  return {
    workspace: '',
    sessions: new Map(), // id -> Session (workspace list)
    sessionsLoaded: false,
    sessionsCursor: '',
    sessionsError: null,
    wsPresence: [], // everyone connected to the workspace (with the sessions they watch)
    open: null, // see openSession
    pending: new Map(), // clientSubmitId -> pending submission
    now: Date.now(),
  };
}

export function openSession(state, sessionId) {
  state.open = {
    id: sessionId,
    session: state.sessions.get(sessionId) || null,
    turns: new Map(),
    messages: new Map(),
    interactions: new Map(), // root turn id -> [interaction] (the tree's latest-turn interactions)
    history: new Map(), // turn id -> [interaction]: durable history (snapshot, turn.list pages)
    queue: null,
    presence: [],
    goal: null,
    loaded: false,
    deleted: false,
    purged: false, // deleted, then purged while open: nothing restores it
    error: null,
    maxOrdinal: 0,
  };
  return state.open;
}

export function closeSession(state) {
  state.open = null;
}

// ---------- workspace topic ----------

export function applyWorkspaceSnapshot(state, snap) {
  const list = arrayOf(snap, 'sessions', 'items');
  state.sessions = new Map();
  for (const s of list) if (s && s.id && !s.deletedAt) state.sessions.set(s.id, s);
  state.sessionsLoaded = true;
  state.sessionsCursor = (snap && snap.nextCursor) || '';
  state.sessionsError = null;
  if (snap && snap.presence) state.wsPresence = presenceList(snap.presence);
  if (state.open && state.sessions.has(state.open.id)) {
    state.open.session = mergeSession(state.open.session, state.sessions.get(state.open.id));
  }
}

export function appendSessions(state, page) {
  for (const s of arrayOf(page, 'sessions', 'items')) {
    if (s && s.id && !s.deletedAt && !state.sessions.has(s.id)) state.sessions.set(s.id, s);
  }
  state.sessionsCursor = (page && page.nextCursor) || '';
}

export function applyWorkspaceEvent(state, kind, payload) {
  if (kind === 'session_summary' && payload && payload.session) {
    upsertSession(state, payload.session);
    return true;
  }
  if (kind === 'session_removed' && payload && payload.sessionId) {
    removeSession(state, payload.sessionId);
    return true;
  }
  if (kind === 'trash_changed' && payload) {
    // A purge of the open (deleted) session: nothing can restore it now.
    const open = state.open;
    if (open && (payload.purged || []).includes(open.id)) {
      open.deleted = true;
      open.purged = true;
      return true;
    }
    return false;
  }
  if (kind === 'presence' && payload) {
    state.wsPresence = presenceList(payload);
    return true;
  }
  return false;
}

// watchersOf lists the people watching one session, from the workspace
// presence (for the session list).
export function watchersOf(state, sessionId) {
  return state.wsPresence.filter((w) => (w.sessions || []).includes(sessionId));
}

export function removeSession(state, id) {
  state.sessions.delete(id);
  if (state.open && state.open.id === id) state.open.deleted = true;
}

// upsertSession records a session summary in the list (and the open
// session), dropping tombstoned sessions from the list.
export function upsertSession(state, s) {
  if (!s || !s.id) return;
  const prev = state.sessions.get(s.id);
  if (s.deletedAt) {
    state.sessions.delete(s.id);
  } else if (!prev || !isOlder(s, prev)) {
    state.sessions.set(s.id, s);
  }
  if (state.open && state.open.id === s.id) {
    state.open.session = mergeSession(state.open.session, s);
    state.open.deleted = !!s.deletedAt;
  }
}

function isOlder(a, b) {
  // Snapshots are authoritative, but never let a stale summary move back.
  return !!(a.updatedAt && b.updatedAt && compareInstants(a.updatedAt, b.updatedAt) < 0);
}

// compareInstants orders two RFC 3339 timestamps (-1, 0, 1). The server
// trims trailing zeros of the fraction ("…:01.5Z" is 500 ms), so the
// strings themselves do not sort: "…:01.512Z" < "…:01.5Z" as text. UTC
// ("Z") stamps compare exactly with their fractions padded; anything else
// by Date.parse (milliseconds).
export function compareInstants(a, b) {
  const ka = instantKey(a);
  const kb = instantKey(b);
  if (ka !== null && kb !== null) return ka === kb ? 0 : (ka < kb ? -1 : 1);
  const ta = Date.parse(a);
  const tb = Date.parse(b);
  if (Number.isNaN(ta) || Number.isNaN(tb)) return a === b ? 0 : (a < b ? -1 : 1);
  return ta === tb ? 0 : (ta < tb ? -1 : 1);
}

const UTC_INSTANT = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$/;

function instantKey(s) {
  const m = UTC_INSTANT.exec(s || '');
  return m ? m[1] + '.' + (m[2] || '').padEnd(9, '0') : null;
}

function mergeSession(prev, next) {
  if (!next) return prev;
  if (prev && isOlder(next, prev)) return prev;
  return next;
}

// sortedSessions: pinned first, then most recently updated.
export function sortedSessions(state) {
  return [...state.sessions.values()].sort((a, b) => {
    if (!!b.pinned !== !!a.pinned) return b.pinned ? 1 : -1;
    const c = compareInstants(a.updatedAt || a.createdAt || '', b.updatedAt || b.createdAt || '');
    if (c !== 0) return -c;
    return a.id < b.id ? 1 : -1;
  });
}

// ---------- session topic ----------

export function applySessionSnapshot(state, snap) {
  const open = state.open;
  if (!open) return;
  if (snap && snap.session) {
    open.session = snap.session;
    open.deleted = !!snap.session.deletedAt;
    if (!snap.session.deletedAt) upsertSession(state, snap.session);
  }
  open.turns = new Map();
  for (const t of arrayOf(snap, 'turns')) if (t && t.id) open.turns.set(t.id, t);
  open.messages = new Map();
  open.maxOrdinal = 0;
  for (const m of arrayOf(snap, 'messages')) putMessage(open, m);
  open.interactions = new Map();
  if (snap && snap.interactionTree) setInteractions(open, snap.interactionTree);
  open.history = new Map();
  addHistory(open, arrayOf(snap, 'interactions'));
  if (snap && snap.queue) open.queue = snap.queue;
  if (snap && snap.goal) open.goal = snap.goal;
  if (snap && snap.presence) open.presence = presenceList(snap.presence);
  open.turnsHasMore = !!(snap && snap.turnsHasMore);
  open.messagesHasMore = !!(snap && snap.messagesHasMore);
  open.loaded = true;
  open.error = null;
}

// addMessages merges a message.list page (e.g. older history).
export function addMessages(state, page) {
  if (!state.open) return;
  for (const m of arrayOf(page, 'messages')) putMessage(state.open, m);
}

export function addTurns(state, page) {
  if (!state.open) return;
  for (const t of arrayOf(page, 'turns')) putTurn(state.open, t);
  addHistory(state.open, arrayOf(page, 'interactions'));
}

// addHistory records interactions of past turns (any state) by turn.
export function addHistory(open, list) {
  for (const i of list || []) {
    if (!i || !i.turnId) continue;
    const cur = (open.history.get(i.turnId) || []).filter((x) => interactionKey(x) !== interactionKey(i));
    cur.push(i);
    open.history.set(i.turnId, cur);
  }
}

export function interactionKey(i) {
  return `${i.sessionId || ''}/${i.turnId || ''}/${i.requestId || i.id || ''}`;
}

// turnInteractions is what to show under one of the session's turns: the
// durable history merged with the live tree (live wins: it is newer), in
// the order the agent asked.
export function turnInteractions(open, turnId) {
  const by = new Map();
  for (const i of open.history.get(turnId) || []) by.set(interactionKey(i), i);
  for (const i of open.interactions.get(turnId) || []) by.set(interactionKey(i), i);
  return [...by.values()].sort(byAsked);
}

function byAsked(a, b) {
  const c = compareInstants(a.createdAt || '', b.createdAt || '');
  if (c !== 0) return c;
  return (a.requestId || '') < (b.requestId || '') ? -1 : 1;
}

// olderCursors: where to page back from (smallest message version and
// turn seq we hold).
export function olderCursors(open) {
  let version = Infinity;
  for (const m of open.messages.values()) if (typeof m.version === 'number' && m.version < version) version = m.version;
  let seq = Infinity;
  for (const t of open.turns.values()) if (typeof t.seq === 'number' && t.seq < seq) seq = t.seq;
  return { beforeVersion: Number.isFinite(version) ? version : 0, before: Number.isFinite(seq) ? seq : 0 };
}

export function applySessionEvent(state, kind, payload) {
  const open = state.open;
  if (!payload) return false;
  switch (kind) {
    case 'session_summary':
      upsertSession(state, payload.session);
      return true;
    case 'session_removed':
      if (payload.sessionId) removeSession(state, payload.sessionId);
      return true;
    case 'turn_update':
      if (!open || !payload.turn) return false;
      if (payload.turn.sessionId && payload.turn.sessionId !== open.id) return false;
      putTurn(open, payload.turn);
      return true;
    case 'message_update':
      if (!open || !payload.message) return false;
      if (payload.message.sessionId && payload.message.sessionId !== open.id) return false;
      putMessage(open, payload.message);
      return true;
    case 'message_delta':
      if (!open || (payload.sessionId && payload.sessionId !== open.id)) return false;
      return applyMessageDelta(open, payload) !== 'ignored';
    case 'interaction_snapshot':
      if (!open) return false;
      setInteractions(open, payload);
      return true;
    case 'queue':
    case 'queue_state': {
      if (!open) return false;
      const q = payload.queue || payload;
      if (q.sessionId && q.sessionId !== open.id) return false;
      // Revisions only grow: an older queue never replaces a newer one.
      if (open.queue && (q.revision || 0) < (open.queue.revision || 0)) return false;
      open.queue = q;
      return true;
    }
    case 'goal_state':
      if (!open) return false;
      open.goal = payload.goal || payload;
      return true;
    case 'presence':
      if (!open) return false;
      if (payload.sessionId && payload.sessionId !== open.id) return false;
      open.presence = presenceList(payload);
      return true;
    default:
      return false;
  }
}

const PHASE_RANK = { queued: 0, dispatched: 1, provider_observed: 2, resolving_identity: 3, durably_accepted: 4, settled: 5 };

function putTurn(open, t) {
  if (!t || !t.id) return;
  const prev = open.turns.get(t.id);
  // A turn never moves back; a settled turn stays settled.
  if (prev && (PHASE_RANK[prev.phase] ?? -1) > (PHASE_RANK[t.phase] ?? -1)) return;
  open.turns.set(t.id, t);
}

export function putMessage(open, m) {
  if (!m || !m.id) return;
  const prev = open.messages.get(m.id);
  if (prev && !prev.placeholder && typeof prev.version === 'number' && typeof m.version === 'number' && m.version < prev.version) return;
  const next = { ...m, content: m.content || { text: '' } };
  // Deltas that ran ahead of this update stay visible until the next update.
  if (prev && prev.streamedText && next.streaming) {
    const have = next.content.text || '';
    if (prev.streamedText.length > have.length && prev.streamedText.startsWith(have)) {
      next.streamedText = prev.streamedText;
    }
  }
  open.messages.set(m.id, next);
  if (typeof m.ordinal === 'number' && m.ordinal > open.maxOrdinal) open.maxOrdinal = m.ordinal;
}

// messageText is what to show for a message: display text when present,
// otherwise model text, extended by any streamed text not yet committed.
export function messageText(m) {
  const c = m.content || {};
  if (m.role === 'user' && c.displayText) return c.displayText;
  if (m.streamedText && m.streamedText.length > (c.text || '').length) return m.streamedText;
  return c.text || '';
}

// ---------- live text deltas ----------

// Offsets count UTF-16 code units (JavaScript string indices), as the
// server announces in ready.offsetUnit; 'utf8' (bytes) is understood too.
let offsetUnit = 'utf16';
export function setOffsetUnit(u) { offsetUnit = u === 'utf8' ? 'utf8' : 'utf16'; }

export function utf8Length(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) { n += 4; i++; }
    else n += 3;
  }
  return n;
}

// utf8Index converts a byte offset to a string index, or -1 when the offset
// falls inside a character.
export function utf8Index(s, offset) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    if (n === offset) return i;
    if (n > offset) return -1;
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) { n += 4; i++; }
    else n += 3;
  }
  return n === offset ? s.length : -1;
}

function unitLength(s, unit) { return unit === 'utf16' ? s.length : utf8Length(s); }
function unitIndex(s, off, unit) { return unit === 'utf16' ? (off <= s.length ? off : -1) : utf8Index(s, off); }

// applyDelta puts `piece` at `offset` of `text`. Returns {text, status}:
// 'applied', 'stale' (already have it) or 'gap' (text missing before it).
export function applyDelta(text, offset, piece, unit = offsetUnit) {
  const have = unitLength(text, unit);
  if (offset > have) return { text, status: 'gap' };
  if (offset + unitLength(piece, unit) <= have) return { text, status: 'stale' };
  const idx = unitIndex(text, offset, unit);
  if (idx < 0) return { text, status: 'gap' };
  return { text: text.slice(0, idx) + piece, status: 'applied' };
}

export function applyMessageDelta(open, d) {
  const status = deltaInto(open, d);
  // An end (ensemble.v2) with text missing: no complete message_update
  // follows it, only a fresh snapshot completes the message.
  if (status === 'gap' && d.done) open.resync = true;
  return status;
}

function deltaInto(open, d) {
  if (!d || !d.messageId || typeof d.text !== 'string') return 'ignored';
  const offset = typeof d.offset === 'number' ? d.offset : 0;
  let m = open.messages.get(d.messageId);
  if (!m) {
    if (offset !== 0) return 'gap'; // the next message_update brings it
    open.maxOrdinal += 0.001; // after everything known until the update says where
    m = {
      id: d.messageId, sessionId: d.sessionId || open.id, turnId: d.turnId || '',
      role: 'agent', kind: d.kind || 'text', ordinal: open.maxOrdinal,
      content: { text: '' }, streaming: true, placeholder: true,
      createdAt: new Date().toISOString(),
    };
    open.messages.set(m.id, m);
  }
  const base = m.streamedText && m.streamedText.length > (m.content.text || '').length ? m.streamedText : (m.content.text || '');
  const r = applyDelta(base, offset, d.text);
  if (d.done && r.status !== 'gap') {
    // The end of streaming (ensemble.v2): the text as it now stands is the
    // message's final text; no complete message_update follows.
    const { streamedText, deltaGap, ...rest } = m;
    open.messages.set(m.id, {
      ...rest, content: { ...m.content, text: r.text }, streaming: false,
      version: typeof d.version === 'number' ? d.version : m.version, updatedAt: d.updatedAt || m.updatedAt,
    });
    return r.status;
  }
  if (r.status === 'applied') {
    open.messages.set(m.id, { ...m, streamedText: r.text, streaming: true });
  } else if (r.status === 'gap') {
    m.deltaGap = true;
  }
  return r.status;
}

// ---------- interactions ----------

// setInteractions applies one interaction_snapshot: the complete list for
// the exact root turn it names (root turn plus sub-agent sessions' latest
// turns). An empty list clears that root turn only; other root turns are
// never inferred from the contents.
export function setInteractions(open, p) {
  if (!open || !p) return;
  const turnId = p.turnId || '';
  const list = arrayOf(p, 'interactions', 'items').slice().sort(byAsked);
  if (list.length === 0) open.interactions.delete(turnId);
  else open.interactions.set(turnId, list);
}

// actionable: still waiting for an answer and its root turn is running.
export function actionable(open, rootTurnId, i) {
  if (!i || (i.state && i.state !== 'pending')) return false;
  const t = open && open.turns.get(rootTurnId);
  return !(t && t.phase === 'settled');
}

export function pendingInteractions(open) {
  if (!open) return [];
  const out = [];
  for (const [rootTurnId, list] of open.interactions) {
    for (const i of list) if (actionable(open, rootTurnId, i)) out.push(i);
  }
  return out;
}

function optionName(i, id) {
  const o = (i.options || []).find((x) => (x.optionId || x.id) === id);
  return o ? (o.name || id) : id;
}

// interactionStatus is the line under an interaction card: who answered
// what and what became of it. Superseded is explained, never an error.
export function interactionStatus(i, rootTurnSettled) {
  const who = i.answeredByName || i.answeredBy || 'Someone';
  const chose = i.response ? `“${optionName(i, i.response.optionId)}”` : '';
  switch (i.state || 'pending') {
    case 'pending':
      return rootTurnSettled ? { text: 'The turn ended before anyone answered.', tone: 'muted' } : null;
    case 'answered':
      if (i.resolution === 'delivered') return { text: `Answered by ${who}: ${chose} — the agent has it.`, tone: 'ok' };
      return { text: `Answered by ${who}: ${chose} — delivering to the agent…`, tone: 'ok' };
    case 'canceled':
      return { text: 'The turn was stopped, so the agent was told “cancelled”.', tone: 'muted' };
    case 'superseded':
      if (i.response) {
        const why = i.resolution === 'delivery_failed' ? 'it could not be delivered' : 'the agent had already stopped waiting for it';
        return { text: `Answered by ${who}: ${chose} — but ${why}.`, tone: 'muted' };
      }
      if (i.resolution === 'withdrawn') return { text: 'The agent withdrew this request.', tone: 'muted' };
      return { text: 'No longer needed: the turn ended before anyone answered.', tone: 'muted' };
    default:
      return { text: i.state, tone: 'muted' };
  }
}

// respondNote explains a response that did not win.
export function respondNote(res, mineOption) {
  if (!res || res.disposition !== 'superseded') return '';
  const i = res.interaction || {};
  if (i.response && i.response.optionId !== mineOption) {
    return `${i.answeredByName || i.answeredBy || 'Someone'} answered first (${optionName(i, i.response.optionId)}); your answer was not used.`;
  }
  return 'This request was no longer waiting for an answer; your answer was not used.';
}

// ---------- derived views ----------

export function sortedMessages(open) {
  if (!open) return [];
  return [...open.messages.values()].sort((a, b) => {
    const oa = a.ordinal ?? Infinity;
    const ob = b.ordinal ?? Infinity;
    if (oa !== ob) return oa - ob;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  });
}

// activeTurn is the open session's active turn, if it is not settled.
export function activeTurn(open) {
  if (!open || !open.session) return null;
  const id = open.session.activeTurnId;
  if (id) {
    const t = open.turns.get(id);
    if (t && t.phase === 'settled') return null;
    return t || { id, phase: 'queued', sessionId: open.id };
  }
  for (const t of open.turns.values()) if (t.phase !== 'settled') return t;
  return null;
}

export function isActivePhase(phase) {
  return phase !== 'settled';
}

export function failureText(reason) {
  const f = explainFailure(reason);
  return `${f.text} ${f.next}`;
}

// stoppedBy names who stopped a turn, or '' when nobody is recorded.
function stoppedBy(t, meId) {
  if (!t.canceledBy && !t.canceledByName) return '';
  if (meId && t.canceledBy === meId) return 'you';
  return t.canceledByName || t.canceledBy;
}

// turnStatus maps a Turn to the status line shown under it. Offline, an
// active turn's state is not known: it says so instead of "working".
export function turnStatus(t, { meId = '', offline = false } = {}) {
  if (!t) return null;
  const stopping = !!t.cancelRequested;
  if (offline && t.phase !== 'settled') {
    return { label: 'status unknown while offline', tone: 'muted', active: false };
  }
  switch (t.phase) {
    case 'queued':
    case 'dispatched':
    case 'provider_observed':
    case 'resolving_identity':
      return { label: stopping ? 'stopping…' : 'sending…', tone: 'pending', active: true };
    case 'durably_accepted':
      return { label: stopping ? 'stopping…' : 'agent is working…', tone: 'working', active: true };
    case 'settled': {
      const by = stoppedBy(t, meId);
      switch (t.outcome) {
        case 'completed': return { label: 'completed', tone: 'ok', active: false };
        case 'canceled': return { label: by ? `Stopped by ${by}` : 'stopped', tone: 'muted', active: false };
        case 'interrupted': return { label: by ? `Interrupted by ${by}` : 'interrupted', tone: 'muted', active: false };
        case 'failed': {
          // A graceful restart stays outcome unknown, but says what it was.
          const f = explainFailure(t.stopReason === 'server_shutdown' ? 'server_shutdown' : t.failureReason);
          return { label: 'failed', tone: 'error', active: false, detail: `${f.text} ${f.next}`, reason: t.failureReason || '' };
        }
        default: return { label: t.outcome || 'settled', tone: 'muted', active: false };
      }
    }
    default:
      return { label: t.phase || 'unknown', tone: 'muted', active: true };
  }
}

// agentLabel is the agent that ran a turn, as the turn recorded it (never
// today's configuration): {name, version, simulated}.
export function agentLabel(turn, session) {
  const a = (turn && turn.agent) || null;
  if (a && a.name) return { name: a.name, version: a.version || '', simulated: !!a.simulated };
  return { name: (session && session.agent) || 'Agent', version: '', simulated: !!(session && session.simulated) };
}

// authorLabel names a user message's author: the display name recorded at
// admission, then the turn's, then one learned from presence, never a raw
// id unless nothing else is known.
export function authorLabel(m, turn, names) {
  return m.authorName || (turn && turn.submittedByName) || (names && names.get(m.author)) || m.author || 'Someone';
}

// ---------- pending submissions ----------

// visiblePending lists this session's submissions that the server has not
// yet reflected as a user message (matched by turn or clientSubmitId).
export function visiblePending(state, sessionId) {
  const out = [];
  for (const p of state.pending.values()) {
    if ((p.sessionId || '') !== (sessionId || '')) continue;
    if (isReflected(state, p)) continue;
    out.push(p);
  }
  return out.sort((a, b) => a.createdAt - b.createdAt);
}

export function isReflected(state, p) {
  const open = state.open;
  if (!open || open.id !== p.sessionId) return false;
  for (const t of open.turns.values()) {
    if (t.clientSubmitId === p.clientSubmitId && hasUserMessage(open, t.id)) return true;
  }
  return !!(p.turnId && hasUserMessage(open, p.turnId));
}

function hasUserMessage(open, turnId) {
  for (const m of open.messages.values()) if (m.turnId === turnId && m.role === 'user') return true;
  return false;
}

// prunePending drops submissions that succeeded and are now visible.
export function prunePending(state) {
  for (const [id, p] of state.pending) {
    if (p.status === 'done' && (isReflected(state, p) || Date.now() - p.doneAt > 30000)) state.pending.delete(id);
  }
}

// ---------- formatting helpers ----------

export function relativeTime(iso, now = Date.now()) {
  if (!iso) return '';
  const t = typeof iso === 'number' ? iso : Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 45) return 'just now';
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.round(m / 60);
  if (h < 24) return `${h} h ago`;
  const d = Math.round(h / 24);
  if (d === 1) return 'yesterday';
  if (d < 7) return `${d} days ago`;
  return new Date(t).toLocaleDateString(undefined, { month: 'short', day: 'numeric', year: d > 300 ? 'numeric' : undefined });
}

export function clockTime(iso) {
  if (!iso) return '';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const d = new Date(t);
  const today = new Date();
  const sameDay = d.toDateString() === today.toDateString();
  const time = d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
  return sameDay ? time : `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${time}`;
}

// splitFences splits text into [{type:'text'|'code', text, lang}] on ```
// fences at line starts; an unclosed fence runs to the end (streaming).
export function splitFences(text) {
  const out = [];
  const lines = text.split('\n');
  let buf = [];
  let inCode = false;
  let lang = '';
  const flush = (type) => {
    if (type === 'code' || buf.length) out.push({ type, text: buf.join('\n'), lang: type === 'code' ? lang : '' });
    buf = [];
  };
  for (const line of lines) {
    const m = /^\s*```\s*([\w+#.-]*)\s*$/.exec(line);
    if (m && !inCode) {
      flush('text');
      inCode = true;
      lang = m[1] || '';
    } else if (m && inCode && !m[1]) {
      flush('code');
      inCode = false;
      lang = '';
    } else {
      buf.push(line);
    }
  }
  if (inCode) flush('code');
  else if (buf.length) flush('text');
  if (out.length < 2) return out;
  // Blank lines around a code block are the block's margin, not text.
  return out
    .map((p) => (p.type === 'text' ? { ...p, text: p.text.replace(/^\n+/, '').replace(/\n+$/, '') } : p))
    .filter((p) => !(p.type === 'text' && p.text === ''));
}

function arrayOf(obj, ...keys) {
  if (Array.isArray(obj)) return obj;
  if (!obj) return [];
  for (const k of keys) if (Array.isArray(obj[k])) return obj[k];
  return [];
}
