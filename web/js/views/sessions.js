// The session list in the sidebar: one keyed <li data-session-id> per
// session, updated in place as session_summary events arrive.

import { h, setText, setAttr, reconcile } from '../dom.js';
import { sortedSessions, relativeTime, watchersOf } from '../store.js';

export function createSessionList(root, { onOpen, onLoadMore }) {
  const list = root.querySelector('#session-list');
  const empty = root.querySelector('#session-empty');
  const more = root.querySelector('#session-more');
  const items = new Map(); // id -> {li, title, time, dot, agent, badge, goal, key}

  list.addEventListener('click', (e) => {
    const li = e.target.closest('[data-session-id]');
    if (li && !(e.metaKey || e.ctrlKey || e.shiftKey || e.button > 0)) {
      e.preventDefault();
      onOpen(li.dataset.sessionId);
    }
  });
  more.addEventListener('click', () => onLoadMore());

  function item(s) {
    let it = items.get(s.id);
    if (!it) {
      const dot = h('span', { class: 'live-dot', title: 'A turn is running' });
      const title = h('span', { class: 'session-title' });
      const agent = h('span', { class: 'session-agent' });
      const badge = h('span', { class: 'badge badge-sim', text: 'simulated', title: 'The built-in sim agent: scripted output, no model' });
      const sub = h('span', { class: 'badge badge-sub', text: 'sub-agent', title: 'Started by the agent of another session; its approvals show there too' });
      const goal = h('span', { class: 'badge session-goal' });
      const time = h('time', { class: 'session-time' });
      const pin = h('span', { class: 'session-pin', title: 'Pinned', text: '•' });
      const watching = h('span', { class: 'session-watching' });
      const a = h('a', { class: 'session-link', href: `#session=${encodeURIComponent(s.id)}` },
        h('span', { class: 'session-row' }, dot, title, pin, watching),
        h('span', { class: 'session-meta' }, agent, badge, sub, goal, time));
      const li = h('li', { class: 'session-item', dataset: { sessionId: s.id } }, a);
      it = { li, a, title, time, dot, agent, badge, pin, sub, goal, watching };
      items.set(s.id, it);
    }
    return it;
  }

  // Offline, whether a turn still runs is unknown: no live dots then.
  function render(state, { connected = true } = {}) {
    const sessions = sortedSessions(state);
    const nodes = [];
    const seen = new Set();
    for (const s of sessions) {
      const it = item(s);
      seen.add(s.id);
      const live = connected && !!s.activeTurnId;
      setText(it.title, s.title && s.title.trim() ? s.title : 'Untitled session');
      it.title.classList.toggle('untitled', !(s.title && s.title.trim()));
      setText(it.agent, s.agent || 'agent');
      it.badge.hidden = !s.simulated;
      it.sub.hidden = !s.parentId;
      renderGoal(it.goal, s.goal);
      setAttr(it.li, 'data-parent-id', s.parentId || null);
      it.pin.hidden = !s.pinned;
      setText(it.time, relativeTime(s.updatedAt || s.createdAt, state.now));
      setAttr(it.time, 'datetime', s.updatedAt || s.createdAt || null);
      setAttr(it.time, 'title', s.updatedAt ? new Date(s.updatedAt).toLocaleString() : null);
      it.dot.classList.toggle('on', live);
      // Who watches it now (workspace presence, every replica).
      const ws = connected ? watchersOf(state, s.id) : [];
      setText(it.watching, ws.length ? `${ws.length} watching` : '');
      setAttr(it.watching, 'title', ws.length ? `Watching: ${ws.map((w) => w.name).join(', ')}` : null);
      setAttr(it.watching, 'aria-label', ws.length ? `${ws.length} watching` : null);
      it.watching.hidden = !ws.length;
      setAttr(it.li, 'data-live', live ? 'true' : 'false');
      const current = !!(state.open && state.open.id === s.id);
      it.li.classList.toggle('active', current);
      setAttr(it.a, 'aria-current', current ? 'page' : null);
      nodes.push(it.li);
    }
    for (const id of [...items.keys()]) if (!seen.has(id)) items.delete(id);
    reconcile(list, nodes);
    list.setAttribute('aria-busy', state.sessionsLoaded ? 'false' : 'true');
    empty.hidden = !state.sessionsLoaded || sessions.length > 0;
    more.hidden = !state.sessionsCursor;
    root.classList.toggle('loading', !state.sessionsLoaded);
  }

  return { render };
}

// renderGoal: the row's goal badge, for an active or paused goal only (the
// summary the session list carries; held: restored or imported, waiting
// for a person's resume).
function renderGoal(el, g) {
  const live = !!(g && (g.status === 'active' || g.status === 'paused'));
  el.hidden = !live;
  if (!live) {
    setAttr(el, 'data-status', null);
    setAttr(el, 'title', null);
    return;
  }
  const state = g.held ? 'held' : g.status;
  setText(el, state === 'active' ? 'goal' : `goal ${state}`);
  setAttr(el, 'data-status', state);
  setAttr(el, 'title', `Goal (${state}): ${g.objective || ''}`);
}
