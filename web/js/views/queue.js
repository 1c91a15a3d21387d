// The session's message queue, above the composer: what people typed while
// the agent worked, in order, for every collaborator. Each entry shows its
// author, "queued" (a follow-up for the next turn) or "steering" (waiting
// for the agent's next pull point), and — for its author or an admin —
// retract (×) and, where the agent takes steering, "Steer now".

import { h, setText, setAttr, reconcile } from '../dom.js';

export function createQueueView(root, { onRetract, onSteer }) {
  const list = h('ol', { class: 'queue-list', 'aria-label': 'Queued messages' });
  root.appendChild(list);
  const rows = new Map(); // entry id -> {el, parts}

  function row(id) {
    let r = rows.get(id);
    if (r) return r;
    const author = h('span', { class: 'queue-author' });
    const state = h('span', { class: 'queue-state' });
    const text = h('span', { class: 'queue-text' });
    const steer = h('button', { type: 'button', class: 'queue-steer', onclick: () => onSteer(r.entry) }, 'Steer now');
    const retract = h('button', { type: 'button', class: 'queue-retract', 'aria-label': 'Retract this message', title: 'Retract', onclick: () => onRetract(r.entry) }, '×');
    const el = h('li', { class: 'queue-entry', dataset: { entryId: id } }, author, state, text, steer, retract);
    r = { el, author, state, text, steer, retract, entry: null };
    rows.set(id, r);
    return r;
  }

  return {
    // render({queue, me, admin, canAct, steering, busyIds})
    render({ queue, me, admin, canAct, steering, busyIds }) {
      const entries = (queue && Array.isArray(queue.entries)) ? queue.entries : [];
      root.hidden = entries.length === 0;
      const nodes = [];
      const seen = new Set();
      for (const e of entries) {
        const r = row(e.id);
        r.entry = e;
        seen.add(e.id);
        setText(r.author, e.authorName || e.author || 'someone');
        const label = e.disposition === 'steering' ? 'steering' : 'queued';
        setText(r.state, label);
        r.state.className = `queue-state queue-${label}`;
        setText(r.text, (e.content && (e.content.displayText || e.content.text)) || '');
        const mine = !!me && e.author === me;
        const busy = busyIds.has(e.id);
        r.retract.hidden = !(canAct && (mine || admin));
        r.retract.disabled = busy;
        r.steer.hidden = !(canAct && mine && steering && e.disposition === 'followup');
        r.steer.disabled = busy;
        setAttr(r.el, 'data-author', e.author || null);
        nodes.push(r.el);
      }
      for (const id of [...rows.keys()]) if (!seen.has(id)) rows.delete(id);
      reconcile(list, nodes);
    },
  };
}
