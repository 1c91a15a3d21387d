// Ensemble browser GUI: wiring. Sign-in from the URL fragment, one
// WebSocket connection, the workspace and open-session subscriptions, and
// the actions (submit, new session, stop, answer) that the views call.

import * as auth from './auth.js';
import { Connection, backoffDelay } from './connection.js';
import * as S from './store.js';
import { applyChanges } from './position.js';
import { createHeader } from './views/header.js';
import { createSessionList } from './views/sessions.js';
import { createTranscript } from './views/transcript.js';
import { createComposer } from './views/composer.js';
import { createTrash } from './views/trash.js';
import { createQueueView } from './views/queue.js';
import { setText, h, initials } from './dom.js';
import { presenceSummary, createTypingSignal } from './presence.js';
import { checkPrompt, MAX_FRAME_BYTES, MAX_PROMPT_BYTES } from './limits.js';
import { errorLine, explainDisconnect } from './explain.js';
import { hueOf } from './views/transcript.js';
import { forkInfo, createSessionControls } from './views/fork.js';
import { createGoalBar, applyGoalState } from './views/goal.js';

const $ = (sel) => document.querySelector(sel);

function uuid() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  // Fallback for non-secure contexts (plain http on a LAN address).
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

function parseRoute() {
  const p = new URLSearchParams(location.hash.replace(/^#/, ''));
  return { ws: p.get('ws') || '', session: p.get('session') || '' };
}

// ---------- sign-in page ----------

function showSignIn(reason) {
  $('#app').hidden = true;
  $('#signin').hidden = false;
  document.title = 'Sign in · Ensemble';
  const r = $('#signin-reason');
  setText(r, reason || '');
  r.hidden = !reason;
  const origin = location.origin.startsWith('http') ? location.origin : 'http://127.0.0.1:8080';
  for (const el of document.querySelectorAll('[data-origin]')) setText(el, origin);
  if (location.host) for (const el of document.querySelectorAll('[data-host]')) setText(el, location.host);
  $('#token-form').onsubmit = (e) => {
    e.preventDefault();
    const t = $('#token-input').value.trim().replace(/^.*#token=/, '');
    if (!t) return;
    if (!auth.decodeJwtPayload(t)) {
      setText(r, 'That does not look like a token: a JWT has three parts separated by dots.');
      r.hidden = false;
      return;
    }
    location.hash = 'token=' + encodeURIComponent(t);
    location.reload();
  };
  // A sign-in link pasted into this tab only changes the hash: take it.
  window.onhashchange = () => {
    if (/(^#|&)token=/.test(location.hash)) {
      window.onhashchange = null;
      main();
    }
  };
}

// ---------- the app ----------

function start(token, claimsPrincipal) {
  window.onhashchange = null;
  $('#signin').hidden = true;
  $('#app').hidden = false;

  const state = S.createState();
  let principal = claimsPrincipal;
  const names = new Map([[principal.id, principal.name]]);
  const stopping = new Set();
  let lastRejected = null;
  let wsSub = null;
  let sessionSub = null;
  let serverAgent = null; // from ready: what this server runs now
  let limits = { maxFrame: MAX_FRAME_BYTES, maxPrompt: MAX_PROMPT_BYTES };
  const announced = new Map(); // turn id -> status label last announced

  const conn = new Connection({
    url: `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/v1/ws`,
    token,
  });

  // ---- rendering ----
  let scheduled = false;
  function update() {
    if (scheduled) return;
    scheduled = true;
    const run = () => { scheduled = false; render(); };
    if (document.hidden) setTimeout(run, 100);
    else requestAnimationFrame(run);
  }

  const header = createHeader($('#topbar'), {
    onWorkspace: (id) => navigate(id, ''),
    onSignOut: () => {
      auth.signOut();
      conn.stop();
      location.hash = '';
      showSignIn('You signed out. Open a sign-in link to come back.');
    },
    onReconnect: () => conn.reconnectNow(),
    onToggleSidebar: () => document.body.classList.toggle('sidebar-open'),
  });
  header.setUser(principal);

  const sessions = createSessionList($('#sidebar'), {
    onOpen: (id) => {
      document.body.classList.remove('sidebar-open');
      navigate(state.workspace, id);
    },
    onLoadMore: loadMoreSessions,
  });

  const transcript = createTranscript($('#transcript'), {
    onRestoreDeleted: async (sessionId) => {
      await conn.request('session.restore', { workspace: state.workspace, sessionId });
      update();
    },
    onRetryPending: (id) => {
      const p = state.pending.get(id);
      if (p) send(p);
    },
    onDiscardPending: (id) => {
      state.pending.delete(id);
      update();
    },
    onRespond: async ({ sessionId, turnId, requestId, optionId, payload }) => {
      const response = payload ? { optionId, payload } : { optionId };
      const res = await conn.request('interaction.respond', {
        workspace: state.workspace, sessionId, turnId, requestId, response,
      });
      update();
      return res;
    },
    onHint: (cmd) => composer.insert(cmd),
    onLoadEarlier: loadEarlier,
    onRetryPrompt: (text) => onSubmit(text),
    isSim: () => isSimAgent(),
    forkInfo: (t) => forkInfo({ agent: serverAgent, role: currentRole(), open: state.open, turn: t,
      connected: conn.state === 'connected', inFlight: forking.has(t.id) }),
    onFork: (t) => onFork(t),
  });

  // Fork, pin and settings (views/fork.js).
  const forking = new Set(); // turn ids whose fork request is in flight
  const sessionControls = createSessionControls({
    bar: $('#session-bar'), after: $('#session-bar'),
    request: (op, input) => conn.request(op, { workspace: state.workspace, ...input }),
    onError: (err) => showComposerError(err),
    onChanged: (s) => { if (s) S.upsertSession(state, s); update(); },
  });
  async function onFork(t) {
    const open = state.open;
    if (!open || forking.has(t.id)) return;
    forking.add(t.id);
    showComposerError(null);
    update();
    const ws = state.workspace;
    try {
      const res = await conn.request('session.fork', { workspace: ws, sessionId: open.id, turnId: t.id, clientSubmitId: uuid() });
      S.upsertSession(state, res.session);
      if (state.workspace === ws) navigate(ws, res.session.id);
    } catch (err) {
      showComposerError(err);
    } finally {
      forking.delete(t.id);
      update();
    }
  }

  // /sim hints only when the agent really is the simulator.
  function isSimAgent() {
    if (serverAgent) return !!serverAgent.simulated;
    const s = state.open && state.open.session;
    return !!(s && s.simulated);
  }

  const goalBar = createGoalBar($('#goal-bar'), {
    onControl: async (action, goal) => {
      const open = state.open;
      if (!open) return;
      const res = await conn.request('goal.control', {
        workspace: state.workspace, sessionId: open.id, clientSubmitId: uuid(), action, ...(goal ? { goal } : {}),
      });
      if (res && res.state && applyGoalState(state.open, res.state)) update();
    },
  });

  const composer = createComposer($('#composer'), {
    onSubmit,
    onStop,
    onEdit: () => {
      if (composerErrorCode) showComposerError(null);
      if (state.open && canPrompt() && composer.text.trim()) typing.keystroke();
    },
  });
  // "Alice is typing…": a rate-limited signal while keys come, and a stop.
  const typing = createTypingSignal((on) => {
    const open = state.open;
    if (!open || !conn.ready) return;
    conn.request('presence.typing', { workspace: state.workspace, sessionId: open.id, typing: on }).catch(() => {});
  });
  // The queue above the composer (views/queue.js); queueBusy: entries with
  // a retract or steer in flight.
  const queueBusy = new Set();
  // queueNote: the composer note is about the queue; it clears once no
  // turn runs (what it said is over).
  let queueNote = false;
  const queueView = createQueueView($('#queue'), { onRetract: onRetractQueued, onSteer: onSteerNow });
  let composerErrorCode = '';
  let busyTurnSeen = '';
  function showComposerError(err) {
    composerErrorCode = err ? err.code || 'error' : '';
    busyTurnSeen = '';
    composer.showError(err);
  }

  function render() {
    state.now = Date.now();
    S.prunePending(state);
    const open = state.open;
    for (const id of [...stopping]) {
      const t = open && open.turns.get(id);
      if (!t || t.phase === 'settled') stopping.delete(id);
    }
    header.setWorkspaces(principal.workspaces, state.workspace);
    const connected = conn.state === 'connected';
    sessions.render(state, { connected });
    const role = currentRole();
    const subagent = !!(open && open.session && open.session.parentId);
    const readOnly = !canPrompt();
    // A deleted session is read-only for everyone until it is restored:
    // its notice's Restore is the only control that writes.
    const deleted = !!(open && open.deleted);
    const purged = deleted && !!open.purged; // gone for good: nothing to restore
    transcript.render(state, {
      principal, names, connected,
      canPrompt: !readOnly && connected && !deleted,
      canAnswer: role !== 'viewer' && connected && !deleted,
      canRestore: (role === 'member' || role === 'admin') && connected,
      answerBlocked: role === 'viewer'
        ? 'Viewers can watch but not answer. Ask a workspace admin for a member link.'
        : 'Offline: answers go out once the connection is back.',
    });
    renderSessionBar();
    goalBar.render(open, { canControl: role !== 'viewer' && !subagent && !deleted, connected });
    announceStatus(open);
    // Offline, nothing says "working" and Stop is hidden: the state is not
    // known until the connection is back.
    const active = connected ? S.activeTurn(open) : null;
    $('#new-session').disabled = role === 'viewer' || !state.workspace;
    $('#new-session').title = role === 'viewer' ? 'Viewers can watch sessions but not start them' : '';
    // "A turn is running" stops being true once the turn we saw ends.
    if (composerErrorCode === 'session_busy') {
      if (active) busyTurnSeen = active.id;
      else if (busyTurnSeen) showComposerError(null);
    }
    composer.render({
      reason: role === 'viewer' ? 'Viewers can watch sessions but not prompt. Ask a workspace admin for a member link.'
        : purged ? 'This session was purged: start a new one to prompt again.'
        : deleted ? 'This session is deleted: restore it to prompt again.'
        : subagent ? 'A sub-agent session is driven by its parent session’s agent.' : '',
      busy: !!active && !readOnly && !deleted,
      stopping: !!(active && (stopping.has(active.id) || active.cancelRequested)),
      disabled: deleted || !state.workspace || readOnly,
      placeholder: purged ? 'This session was purged for good.'
        : deleted ? (readOnly ? 'This session is deleted.' : 'This session is deleted. Restore it to prompt again.')
        : subagent ? 'A sub-agent session is driven by its parent session’s agent; prompt the parent.'
        : readOnly ? 'You are a viewer in this workspace: you can watch, not prompt.' : !open
        ? 'What should the agent do? Enter starts a new session…'
        : active ? 'The agent is working. Type your next message…' : 'Message the agent…',
      sendLabel: open ? 'Send' : 'Start',
    });
    if (queueNote && !active && connected) {
      queueNote = false;
      composer.showNote('');
    }
    queueView.render({
      queue: open && open.queue, me: principal.id, admin: role === 'admin', canAct: !readOnly && connected && !deleted,
      steering: !!(open && open.queue && open.queue.steering && active), busyIds: queueBusy,
    });
    const sessionsErr = $('#sessions-error');
    setText(sessionsErr, state.sessionsError ? errorLine(state.sessionsError) : '');
    sessionsErr.hidden = !state.sessionsError;
    const title = open && open.session ? (open.session.title || 'Untitled session') : '';
    document.title = `${active ? '● ' : ''}${title ? title + ' · ' : ''}Ensemble`;
  }

  function renderSessionBar() {
    const bar = $('#session-bar');
    const open = state.open;
    bar.hidden = !open;
    sessionControls.render(open, { editable: !!open && currentRole() !== '' && currentRole() !== 'viewer' && !open.deleted });
    if (!open) return;
    const s = open.session || {};
    setText($('#session-title'), s.title || 'Untitled session');
    $('#session-title').classList.toggle('untitled', !s.title);
    // The label of the agent that ran the latest turn, not the session's
    // creation-time agent.
    const latest = [...open.turns.values()].sort((a, b) => (b.seq || 0) - (a.seq || 0))[0];
    const agent = S.agentLabel(latest, s);
    setText($('#session-agent'), agent.version ? `${agent.name} v${agent.version}` : agent.name);
    $('#session-sim').hidden = !agent.simulated;
    $('#context-lost').hidden = !s.contextLost;
    $('#session-delete').hidden = currentRole() === 'viewer' || !!open.deleted || !!s.parentId;
    const active = conn.state === 'connected' ? S.activeTurn(open) : null;
    $('#session-live').hidden = !active;
    renderPresence(open);
  }

  function renderPresence(open) {
    // Offline, who is here is not known: show nobody rather than a stale list.
    const watchers = conn.state === 'connected' ? open.presence || [] : [];
    const sum = presenceSummary(watchers, principal.id);
    const box = $('#session-presence');
    const key = JSON.stringify([sum.count, watchers.map((w) => [w.userId, w.name])]);
    if (box.dataset.key !== key) {
      box.dataset.key = key;
      const faces = watchers.slice(0, 5).map((w) => {
        const a = h('span', { class: 'avatar avatar-small', title: w.userId === principal.id ? `${w.name} (you)` : w.name,
          dataset: { userId: w.userId }, text: initials(w.name) });
        a.style.setProperty('--hue', String(hueOf(w.userId)));
        return a;
      });
      box.replaceChildren(h('span', { class: 'presence-faces' }, faces),
        h('span', { class: 'presence-count', text: sum.watching }));
      box.title = watchers.map((w) => w.name).join(', ');
      box.setAttribute('aria-label', sum.count ? `${sum.count} watching: ${box.title}` : 'Nobody else is here');
    }
    const t = $('#typing');
    setText(t, sum.typing);
    t.hidden = !sum.typing;
  }

  // Screen readers hear status changes (a turn started, finished, failed,
  // someone joined), never every streamed token.
  let lastPresenceAnnounce = '';
  function announceStatus(open) {
    if (!open) return;
    const say = [];
    for (const t of open.turns.values()) {
      const st = S.turnStatus(t, { meId: principal.id });
      if (!st) continue;
      const prev = announced.get(t.id);
      announced.set(t.id, st.label);
      if (prev !== undefined && prev !== st.label) say.push(`Turn ${st.label}${st.detail ? ': ' + st.detail : ''}`);
    }
    const who = (open.presence || []).map((w) => w.name).join(', ');
    if (lastPresenceAnnounce && who !== lastPresenceAnnounce) say.push(`Watching now: ${who || 'nobody else'}`);
    lastPresenceAnnounce = who || ' ';
    if (say.length) setText($('#announce'), say.join('. '));
  }

  function currentRole() {
    return (principal.workspaces.find((w) => w.id === state.workspace) || {}).role || '';
  }

  function canPrompt() {
    const subagent = !!(state.open && state.open.session && state.open.session.parentId);
    return currentRole() !== 'viewer' && !subagent;
  }

  // ---- connection state ----
  conn.addEventListener('state', (e) => {
    const d = e.detail;
    header.setConnection(d);
    const banner = $('#offline-banner');
    if (d.state === 'connected') {
      banner.hidden = true;
      adoptServerPrincipal(d.principal);
      if (d.offsetUnit) S.setOffsetUnit(d.offsetUnit);
      if (d.agent) serverAgent = d.agent;
      if (d.limits) {
        limits = { maxFrame: d.limits.maxFrameBytes || MAX_FRAME_BYTES, maxPrompt: d.limits.maxPromptBytes || MAX_PROMPT_BYTES };
      }
      if (d.refreshed) return;
      // Errors about the connection are stale once it is back.
      if (['unavailable', 'rate_limited'].includes(composerErrorCode)) showComposerError(null);
      if (state.open && state.open.error && ['unavailable', 'internal'].includes(state.open.error.code)) state.open.error = null;
      for (const p of state.pending.values()) if (p.status === 'waiting') send(p);
      composer.showNote('');
    } else if (d.connectedOnce || d.state === 'offline') {
      typing.stop();
      setText(banner.querySelector('.offline-text'), explainDisconnect(d));
      banner.hidden = false;
      if (d.state === 'offline' && !d.fatal) composer.showNote('Messages you send now wait and go out once the connection is back.');
    }
    update();
  });
  conn.addEventListener('fatal', (e) => {
    const err = e.detail.error;
    if (err && err.code === 'unauthenticated') {
      auth.signOut();
      showSignIn(`The server did not accept your sign-in token (${err.message}). Open a fresh sign-in link.`);
      return;
    }
    showComposerError(err || { code: 'unavailable', message: e.detail.reason });
  });

  function adoptServerPrincipal(p) {
    if (!p || typeof p !== 'object') return;
    const ws = auth.normalizeWorkspaces(p.workspaces || p.memberships);
    const next = {
      ...principal,
      id: p.userId || p.id || p.sub || principal.id,
      name: p.name || p.displayName || principal.name,
      workspaces: ws.length ? ws : principal.workspaces,
    };
    principal = next;
    names.set(principal.id, principal.name);
    header.setUser(principal);
    if (!state.workspace && principal.workspaces.length) route();
  }

  // ---- routing: #ws=<workspace>&session=<id> ----
  function navigate(ws, sessionId) {
    const p = new URLSearchParams();
    if (ws) p.set('ws', ws);
    if (sessionId) p.set('session', sessionId);
    const next = '#' + p.toString();
    if (location.hash === next) route();
    else location.hash = next;
  }

  function route() {
    const r = parseRoute();
    const list = principal.workspaces;
    let ws = r.ws && list.some((w) => w.id === r.ws) ? r.ws : '';
    if (!ws) ws = state.workspace || (list.some((w) => w.id === auth.savedWorkspace()) ? auth.savedWorkspace() : (list[0] && list[0].id) || '');
    if (ws !== state.workspace) chooseWorkspace(ws);
    const want = ws === r.ws || !r.ws ? r.session : '';
    if (want !== (state.open ? state.open.id : '')) showSession(want);
    update();
  }

  function chooseWorkspace(ws) {
    if (wsSub) wsSub.close();
    wsSub = null;
    if (sessionSub) sessionSub.close();
    sessionSub = null;
    S.closeSession(state);
    state.workspace = ws;
    state.sessions = new Map();
    state.sessionsLoaded = false;
    state.sessionsCursor = '';
    state.sessionsError = null;
    if (!ws) {
      showComposerError({ code: 'forbidden', message: 'Your token grants no workspace. Ask for a link that includes one (ensemble token --workspace …).' });
      return;
    }
    auth.saveWorkspace(ws);
    wsSub = conn.subscribe({ workspace: ws, topic: 'workspace' }, {
      onSnapshot(snap) {
        if (state.workspace !== ws) return;
        S.applyWorkspaceSnapshot(state, snap);
        // A (re)snapshot may follow missed events: an open Trash rereads.
        trash.refresh();
        if (!Array.isArray(snap && snap.sessions)) loadSessions();
        update();
      },
      onEvent(kind, payload) {
        if (state.workspace !== ws) return;
        trash.onWorkspaceEvent(kind, payload);
        if (S.applyWorkspaceEvent(state, kind, payload)) update();
      },
      onError(err) {
        if (state.workspace !== ws) return;
        state.sessionsError = err;
        update();
      },
    });
  }

  async function loadSessions() {
    const ws = state.workspace;
    try {
      const page = await conn.request('session.list', { workspace: ws, limit: 100 });
      if (state.workspace !== ws) return;
      S.applyWorkspaceSnapshot(state, page);
    } catch (err) {
      if (state.workspace === ws) state.sessionsError = err;
    }
    update();
  }

  async function loadMoreSessions() {
    const ws = state.workspace;
    if (!state.sessionsCursor) return;
    try {
      const page = await conn.request('session.list', { workspace: ws, cursor: state.sessionsCursor, limit: 100 });
      if (state.workspace === ws) S.appendSessions(state, page);
    } catch (err) {
      if (state.workspace === ws) state.sessionsError = err;
    }
    update();
  }

  function showSession(id) {
    if (!$('#session-title-input').hidden) endRename();
    if (sessionSub) sessionSub.close();
    sessionSub = null;
    showComposerError(null);
    composer.showNote('');
    if (!id) {
      S.closeSession(state);
      update();
      return;
    }
    S.openSession(state, id);
    const ws = state.workspace;
    const isMine = () => state.open && state.open.id === id && state.workspace === ws;
    sessionSub = conn.subscribe({ workspace: ws, topic: 'session', sessionId: id }, {
      onSnapshot(snap) {
        if (!isMine()) return;
        if (snap && snap.agent) serverAgent = snap.agent; // fork attestation, fresher than ready's
        S.applySessionSnapshot(state, snap);
        if (snap && snap.goal) applyGoalState(state.open, snap.goal);
        learnNames(state.open.presence);
        if (!Array.isArray(snap && snap.messages)) loadHistory(id);
        update();
      },
      onChanges(changes) {
        if (isMine() && applyChanges(S.applySessionEvent, state, changes)) update();
      },
      onEvent(kind, payload) {
        if (!isMine()) return;
        if (kind === 'goal_state') {
          if (applyGoalState(state.open, payload)) update();
          return;
        }
        const changed = S.applySessionEvent(state, kind, payload);
        if (state.open.resync) {
          state.open.resync = false;
          sessionSub.resync();
        }
        if (changed) {
          if (kind === 'presence') learnNames(state.open.presence);
          update();
        }
      },
      onError(err) {
        if (!isMine()) return;
        state.open.error = err;
        update();
      },
    });
    update();
    requestAnimationFrame(() => composer.focus());
  }

  async function loadHistory(id) {
    const ws = state.workspace;
    try {
      const [turns, msgs] = await Promise.all([
        conn.request('turn.list', { workspace: ws, sessionId: id, limit: 100 }),
        conn.request('message.list', { workspace: ws, sessionId: id, limit: 500 }),
      ]);
      if (!state.open || state.open.id !== id) return;
      S.addTurns(state, turns);
      S.addMessages(state, msgs);
      state.open.loaded = true;
    } catch (err) {
      if (state.open && state.open.id === id) state.open.error = err;
    }
    update();
  }

  // loadEarlier pages back past the snapshot window (messages by version,
  // turns by seq).
  async function loadEarlier() {
    const open = state.open;
    if (!open || open.loadingEarlier) return;
    const ws = state.workspace;
    const { beforeVersion, before } = S.olderCursors(open);
    open.loadingEarlier = true;
    update();
    try {
      const jobs = [conn.request('message.list', { workspace: ws, sessionId: open.id, beforeVersion, limit: 200 })];
      if (open.turnsHasMore && before > 1) jobs.push(conn.request('turn.list', { workspace: ws, sessionId: open.id, before, limit: 50 }));
      const [msgs, turns] = await Promise.all(jobs);
      if (state.open !== open) return;
      S.addMessages(state, msgs);
      open.messagesHasMore = !!msgs.hasMore;
      if (turns) {
        S.addTurns(state, turns);
        open.turnsHasMore = !!turns.hasMore;
      }
    } catch (err) {
      if (state.open === open) showComposerError(err);
    } finally {
      open.loadingEarlier = false;
      update();
    }
  }

  function learnNames(list) {
    for (const p of list || []) if (p && (p.userId || p.id) && p.name) names.set(p.userId || p.id, p.name);
  }

  // ---- actions ----
  function onSubmit(raw) {
    // Outer blank lines and trailing spaces are never meaningful.
    const text = raw.replace(/^(\s*\n)+/, '').replace(/\s+$/, '');
    if (!text) return;
    const size = checkPrompt(text, limits);
    if (!size.ok) {
      showComposerError(size.error); // the text stays in the box
      return;
    }
    typing.stop();
    showComposerError(null);
    composer.showNote('');
    const open = state.open;
    if (open && open.deleted) return;
    const sessionId = open ? open.id : '';
    // A retry of the same text reuses the clientSubmitId: the server then
    // returns the same turn instead of dispatching twice.
    let p = [...state.pending.values()].find((x) => x.sessionId === sessionId && x.text === text && (x.status === 'failed' || x.status === 'waiting'));
    if (!p && lastRejected && lastRejected.sessionId === sessionId && lastRejected.text === text) p = lastRejected;
    if (!p) p = { clientSubmitId: uuid(), sessionId, text, createdAt: Date.now(), attempts: 0 };
    lastRejected = null;
    state.pending.set(p.clientSubmitId, p);
    composer.clear();
    send(p);
  }

  async function send(p) {
    if (p.status === 'sending') return;
    p.status = 'sending';
    p.error = null;
    p.attempts += 1;
    update();
    const ws = state.workspace;
    try {
      // A prompt too big for one WebSocket frame goes over HTTP: same
      // operation, same clientSubmitId, same answers.
      const call = checkPrompt(p.text, limits).viaHttp ? httpRequest : (op, input) => conn.request(op, input);
      if (!p.sessionId) {
        const res = await call('session.create', { workspace: ws, content: { text: p.text }, clientSubmitId: p.clientSubmitId });
        p.sessionId = res.session.id;
        p.turnId = res.turn ? res.turn.id : '';
        markDone(p);
        S.upsertSession(state, res.session);
        if (!state.open && state.workspace === ws) navigate(ws, res.session.id);
      } else {
        // next_turn: while the agent works the message waits in the
        // session's queue (visible to everyone) instead of being refused.
        const res = await call('turn.message.submit', {
          workspace: ws, sessionId: p.sessionId, clientSubmitId: p.clientSubmitId, content: { text: p.text },
          placement: 'next_turn',
        });
        p.turnId = res.turn ? res.turn.id : '';
        markDone(p);
        if (res.entry) {
          // The queue shows it now; the transcript shows it when it runs.
          state.pending.delete(p.clientSubmitId);
          if (state.open && state.open.id === p.sessionId) {
            S.applySessionEvent(state, 'queue', { sessionId: p.sessionId, revision: res.queueRevision, entries: mergeEntry(state.open.queue, res.entry) });
          }
        }
        if (res.turn && state.open && state.open.id === p.sessionId) S.addTurns(state, { turns: [res.turn] });
        if (res.disposition === 'followup') composer.showNote('Queued as a follow-up: it runs when the current turn ends.');
        else if (res.disposition === 'steering') composer.showNote('Sent into the running turn.');
        queueNote = res.disposition === 'followup' || res.disposition === 'steering';
      }
    } catch (err) {
      // Lost answers and transient refusals are retried with the same
      // clientSubmitId (the server returns the same turn, never a second
      // dispatch). outcome_unknown is final until someone asks again.
      const transient = err.reason === 'connection_lost' || err.reason === 'timeout' || err.code === 'unavailable' || err.code === 'rate_limited';
      const unknown = transient || err.code === 'outcome_unknown';
      if (transient && p.attempts < 6) {
        p.status = 'waiting';
        p.error = err;
        if (conn.ready) setTimeout(() => { if (p.status === 'waiting' && conn.ready) send(p); }, backoffDelay(p.attempts));
      } else if (unknown) {
        p.status = 'failed';
        p.error = err;
      } else {
        // A definite answer (session_busy, invalid_input, forbidden …): the
        // message was not taken. Give the text back and say why, inline.
        state.pending.delete(p.clientSubmitId);
        p.status = 'rejected';
        lastRejected = p;
        if (!composer.text.trim()) composer.setText(p.text);
        showComposerError(err);
      }
    }
    update();
  }

  // httpRequest runs a submit over REST with the same token.
  async function httpRequest(op, input) {
    const { workspace, sessionId, ...body } = input;
    const base = `/v1/workspaces/${encodeURIComponent(workspace)}/sessions`;
    const path = op === 'session.create' ? base : `${base}/${encodeURIComponent(sessionId)}/messages`;
    let res;
    try {
      res = await fetch(path, {
        method: 'POST',
        headers: { Authorization: `Bearer ${conn.token}`, 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
      });
    } catch (e) {
      throw Object.assign(new Error('the request did not reach the server'), { code: 'unavailable', reason: 'connection_lost', retryable: true });
    }
    const data = await res.json().catch(() => null);
    if (!res.ok) {
      const we = (data && data.error) || { code: 'unavailable', message: `HTTP ${res.status}` };
      throw Object.assign(new Error(we.message || `HTTP ${res.status}`), we);
    }
    return data;
  }

  function markDone(p) {
    p.status = 'done';
    p.doneAt = Date.now();
  }

  async function onNewSession() {
    showComposerError(null);
    const text = composer.text;
    if (text.trim()) {
      navigate(state.workspace, '');
      showSession('');
      onSubmit(text);
      return;
    }
    const btn = $('#new-session');
    btn.disabled = true;
    const ws = state.workspace;
    try {
      const res = await conn.request('session.create', { workspace: ws, clientSubmitId: uuid() });
      S.upsertSession(state, res.session);
      if (state.workspace === ws) navigate(ws, res.session.id);
    } catch (err) {
      showComposerError(err);
    } finally {
      btn.disabled = false;
      update();
    }
  }

  // The explicit choice for a session whose agent context is lost: its
  // queued prompt goes to a fresh agent session.
  async function onContinueFresh() {
    const open = state.open;
    if (!open) return;
    const btn = $('#continue-fresh');
    btn.disabled = true;
    showComposerError(null);
    try {
      const res = await conn.request('session.continueFresh', { workspace: state.workspace, sessionId: open.id });
      if (res.session) S.upsertSession(state, res.session);
    } catch (err) {
      showComposerError(err);
    } finally {
      btn.disabled = false;
      update();
    }
  }

  async function onStop() {
    const open = state.open;
    const t = S.activeTurn(open);
    if (!t) return;
    showComposerError(null);
    stopping.add(t.id);
    update();
    try {
      // An interrupt fences the queue for this exact turn (no steering
      // reaches it any more) and answers its canonical end; queued
      // follow-ups then start by themselves.
      const res = await conn.request('turn.interrupt', { workspace: state.workspace, sessionId: open.id, turnId: t.id });
      if (res.turn && state.open === open) S.addTurns(state, { turns: [res.turn] });
    } catch (err) {
      stopping.delete(t.id);
      showComposerError(err);
    }
    update();
  }

  // mergeEntry is the queue's entries with e added (an optimistic view
  // until the queue event with this revision arrives).
  function mergeEntry(queue, e) {
    const entries = (queue && Array.isArray(queue.entries) ? queue.entries : []).filter((x) => x.id !== e.id);
    entries.push(e);
    return entries.sort((a, b) => (a.position || 0) - (b.position || 0));
  }

  async function onRetractQueued(e) {
    const open = state.open;
    if (!open || queueBusy.has(e.id)) return;
    queueBusy.add(e.id);
    showComposerError(null);
    update();
    try {
      await conn.request('queue.retract', { workspace: state.workspace, sessionId: open.id, entryId: e.id });
    } catch (err) {
      showComposerError(err); // e.g. the agent took it already
    } finally {
      queueBusy.delete(e.id);
      update();
    }
  }

  // Steer now: take the follow-up back and send its text into the running
  // turn; if the agent cannot take it any more it is queued again
  // (allowFollowup), never dropped.
  async function onSteerNow(e) {
    const open = state.open;
    const t = S.activeTurn(open);
    if (!open || !t || queueBusy.has(e.id)) return;
    queueBusy.add(e.id);
    showComposerError(null);
    update();
    let retracted = false;
    try {
      await conn.request('queue.retract', { workspace: state.workspace, sessionId: open.id, entryId: e.id });
      retracted = true;
      const res = await conn.request('turn.message.submit', {
        workspace: state.workspace, sessionId: open.id, clientSubmitId: uuid(), content: e.content,
        placement: 'current_turn', allowFollowup: true,
      });
      composer.showNote(res.disposition === 'steering' ? 'Sent into the running turn.' : 'Queued as a follow-up: it runs when the current turn ends.');
      queueNote = true;
    } catch (err) {
      // Taken back but not resent: the text returns to the box.
      if (retracted && !composer.text.trim()) composer.setText((e.content && e.content.text) || '');
      showComposerError(err);
    } finally {
      queueBusy.delete(e.id);
      update();
    }
  }

  // A fresh sign-in link opened in another tab refreshes this connection.
  window.addEventListener('storage', (e) => {
    if (e.key !== 'ensemble.token' || !e.newValue) return;
    const next = auth.principalFromClaims(auth.decodeJwtPayload(e.newValue));
    if (!next || next.id !== principal.id || auth.isExpired(next)) return;
    try { sessionStorage.setItem('ensemble.token', e.newValue); } catch { /* ignore */ }
    principal = { ...principal, exp: next.exp };
    conn.setToken(e.newValue);
    scheduleExpiryNote();
  });

  // Say so before the sign-in runs out (the browser cannot mint tokens).
  let expiryTimer = 0;
  function scheduleExpiryNote() {
    clearTimeout(expiryTimer);
    if (!principal.exp) return;
    const at = principal.exp * 1000 - 5 * 60 * 1000 - Date.now();
    if (at > 2 ** 31 - 1) return;
    expiryTimer = setTimeout(() => {
      composer.showNote('Your sign-in expires in a few minutes. Open a fresh sign-in link (ensemble token --addr …) in another tab to stay connected.');
    }, Math.max(0, at));
  }
  scheduleExpiryNote();

  // Rename: click the title, Enter saves (session.update), Escape cancels.
  const titleEl = $('#session-title');
  const titleInput = $('#session-title-input');
  function startRename() {
    const open = state.open;
    if (!open || !open.session || open.deleted) return;
    titleInput.value = open.session.title || '';
    titleEl.hidden = true;
    titleInput.hidden = false;
    titleInput.focus();
    titleInput.select();
  }
  function endRename() {
    titleInput.hidden = true;
    titleEl.hidden = false;
  }
  async function saveRename() {
    const open = state.open;
    if (titleInput.hidden || !open || !open.session) return endRename();
    const title = titleInput.value.trim();
    endRename();
    if (title === (open.session.title || '')) return;
    try {
      const res = await conn.request('session.update', { workspace: state.workspace, sessionId: open.id, title });
      if (res.session) S.upsertSession(state, res.session);
    } catch (err) {
      showComposerError(err);
    }
    update();
  }
  titleEl.addEventListener('click', startRename);
  titleEl.addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); startRename(); } });
  titleInput.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); saveRename(); }
    if (e.key === 'Escape') { e.preventDefault(); endRename(); }
  });
  titleInput.addEventListener('blur', saveRename);

  // Delete with undo and the Trash (views/trash.js).
  const trash = createTrash(document, {
    request: (op, input) => conn.request(op, input),
    workspace: () => state.workspace,
    role: currentRole,
    nameOf: (id) => names.get(id) || id, // display names people were seen with
    onError: showComposerError,
    onChanged: update,
  });
  $('#session-delete').addEventListener('click', () => {
    const open = state.open;
    if (open && !open.deleted) trash.deleteSession(open.id, open.session && open.session.title);
  });

  $('#new-session').addEventListener('click', onNewSession);
  $('#continue-fresh').addEventListener('click', onContinueFresh);
  window.addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) update(); });
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || e.defaultPrevented) return;
    if (document.body.classList.contains('sidebar-open')) {
      document.body.classList.remove('sidebar-open');
      return;
    }
    // Esc stops the running turn (as in agent CLIs), when you may stop it.
    if (canPrompt() && conn.state === 'connected' && S.activeTurn(state.open)) {
      e.preventDefault();
      onStop();
    }
  });
  $('#scrim').addEventListener('click', () => document.body.classList.remove('sidebar-open'));
  setInterval(update, 30000); // relative times

  // Debug handle for the console and browser tests (read-only use).
  window.ensemble = { state, conn };

  conn.start();
  route();
}

function main() {
  const token = auth.takeToken();
  if (!token) return showSignIn();
  const principal = auth.principalFromClaims(auth.decodeJwtPayload(token));
  if (!principal) {
    auth.signOut();
    return showSignIn('The saved sign-in token is not a valid JWT. Open a fresh sign-in link.');
  }
  if (auth.isExpired(principal)) {
    auth.signOut();
    return showSignIn('Your sign-in link has expired. Get a fresh one.');
  }
  start(token, principal);
}

main();
