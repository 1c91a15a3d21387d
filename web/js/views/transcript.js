// The transcript of the open session: messages in ordinal order, a status
// line per turn, pending interactions, and our own not-yet-confirmed
// submissions. Elements are keyed and updated in place so streaming text,
// open <details> and scroll position survive re-renders.

import { h, icon, setText, setAttr, reconcile, initials } from '../dom.js';
import {
  sortedMessages, messageText, turnStatus, visiblePending, clockTime, splitFences,
  actionable, interactionStatus, respondNote, turnInteractions, authorLabel, agentLabel,
} from '../store.js';
import { markdownView, diffSlot, parsePlan, planView } from '../render.js';
import { errorLine } from '../explain.js';

export const SIM_HINTS = [
  { cmd: '/sim words=300', what: 'stream about 300 words' },
  { cmd: '/sim tool', what: 'run a tool call' },
  { cmd: '/sim think', what: 'show the agent thinking first' },
  { cmd: '/sim hang', what: 'a turn that never ends — try Stop' },
  { cmd: '/sim permission', what: 'the agent asks for approval — anyone can answer' },
  { cmd: '/sim markdown', what: 'an answer with headings, a table and code' },
  { cmd: '/sim diff', what: 'an edit shown as a diff, and an approval with it' },
  { cmd: '/sim checklist', what: 'a plan checked off live' },
];

export function createTranscript(root, handlers) {
  const items = root.querySelector('#transcript-items');
  const jump = root.parentElement.querySelector('#jump-latest');
  const views = new Map(); // key -> view
  let lastOpenId = null;
  let stickToBottom = true;

  root.addEventListener('scroll', () => {
    stickToBottom = atBottom();
    if (stickToBottom) jump.hidden = true;
  }, { passive: true });
  jump.addEventListener('click', () => scrollToBottom(true));

  function atBottom() {
    return root.scrollHeight - root.scrollTop - root.clientHeight < 48;
  }

  function scrollToBottom(smooth) {
    root.scrollTo({ top: root.scrollHeight, behavior: smooth ? 'smooth' : 'auto' });
    stickToBottom = true;
    jump.hidden = true;
  }

  function view(key, make) {
    let v = views.get(key);
    if (!v) {
      v = make();
      views.set(key, v);
    }
    v.used = true;
    return v;
  }

  function render(state, ctx) {
    const open = state.open;
    const openId = open ? open.id : '';
    const switched = openId !== lastOpenId;
    lastOpenId = openId;
    const stick = switched || stickToBottom || atBottom();
    const beforeHeight = root.scrollHeight;
    // Keep what the reader looks at in place when history is prepended.
    const anchor = stick ? null : firstVisible();
    const anchorTop = anchor ? anchor.getBoundingClientRect().top : 0;
    for (const v of views.values()) v.used = false;

    const nodes = [];
    if (!open) {
      const v = view('welcome', () => welcomeView(handlers));
      v.update();
      nodes.push(v.el);
    } else if (open.error && !open.loaded) {
      const v = view('open-error', () => errorView());
      v.update(open.error, 'This session could not be opened.');
      nodes.push(v.el);
    } else if (!open.loaded) {
      nodes.push(view('loading', loadingView).el);
    } else {
      if (open.error) {
        const v = view('refresh-error', () => noteView('alert'));
        v.update(`Live updates for this session stopped. ${errorLine(open.error)}`);
        nodes.push(v.el);
      }
      if (open.deleted) {
        const v = view('deleted', () => deletedView(handlers));
        v.update(open.id, !!ctx.canRestore, !!open.purged);
        nodes.push(v.el);
      }
      // An agent text message that ended empty has nothing to show.
      const msgs = sortedMessages(open).filter((m) => !(m.role === 'agent' && (m.kind || 'text') === 'text' && !messageText(m).trim()
        && (!m.streaming || (open.turns.get(m.turnId) || {}).phase === 'settled')));
      if (msgs.length === 0 && visiblePending(state, open.id).length === 0) {
        const v = view('empty-session', () => emptySessionView(handlers));
        v.update();
        nodes.push(v.el);
      }
      if (open.messagesHasMore) {
        const v = view('earlier', () => earlierView(handlers));
        v.update(open.loadingEarlier);
        nodes.push(v.el);
      }
      // An ACP plan is re-reported whole on every change: show one
      // checklist per turn, where the first report was, with the latest.
      const latestPlan = new Map();
      for (const m of msgs) if (isPlan(m)) latestPlan.set(m.turnId, m);
      const planShown = new Set();
      for (let i = 0; i < msgs.length; i++) {
        const m = msgs[i];
        const prev = msgs[i - 1];
        const turn = open.turns.get(m.turnId);
        const mctx = { ...ctx, turn, agent: agentLabel(turn, open.session) };
        if (isPlan(m)) {
          if (!planShown.has(m.turnId)) {
            planShown.add(m.turnId);
            const v = view(`plan:${m.turnId}`, planMessageView);
            v.update(latestPlan.get(m.turnId), mctx);
            nodes.push(v.el);
          }
        } else {
          const continued = !!(prev && prev.turnId === m.turnId && prev.role === 'agent' && m.role === 'agent');
          const v = view(`m:${m.id}:${m.role}:${m.kind}`, () => messageView(m));
          // A settled turn streams nothing more, whatever the message says.
          const shown = m.streaming && turn && turn.phase === 'settled' ? { ...m, streaming: false } : m;
          v.update(shown, { ...mctx, continued });
          nodes.push(v.el);
        }
        const next = msgs[i + 1];
        const last = !next || next.turnId !== m.turnId;
        // Interaction cards sit where the agent asked: after the tool call
        // they are about (with its live status), else at the turn's end.
        const its = turnInteractions(open, m.turnId);
        const toolId = m.kind === 'tool_call' && m.tool ? m.tool.id : '';
        for (const it of its) {
          const about = it.requestId || (it.tool && it.tool.id);
          const placed = msgs.some((x) => x.turnId === m.turnId && x.kind === 'tool_call' && x.tool && x.tool.id === about);
          const here = toolId ? about === toolId : last && !placed;
          if (!here) continue;
          const tool = toolId ? m.tool : null;
          const iv = view(`i:${it.sessionId}:${it.turnId}:${it.requestId || it.id}`, () => interactionView(handlers));
          iv.update(it, { open, rootTurnId: m.turnId, rootSettled: !!(turn && turn.phase === 'settled'), ctx, tool });
          nodes.push(iv.el);
        }
        if (last && turn) {
          const sv = view(`t:${turn.id}`, () => turnStatusView(handlers));
          sv.update(turn, open.session && open.session.activeTurnId === turn.id, { ...ctx, prompt: promptOf(msgs, turn.id) });
          nodes.push(sv.el);
        }
      }
    }
    for (const p of visiblePending(state, openId)) {
      const v = view(`p:${p.clientSubmitId}`, () => pendingView(handlers));
      v.update(p, ctx);
      nodes.push(v.el);
    }
    for (const [k, v] of views) if (!v.used) views.delete(k);
    reconcile(items, nodes);
    root.dataset.sessionId = openId;

    if (stick) {
      root.scrollTop = root.scrollHeight;
      stickToBottom = true;
    } else {
      if (anchor && anchor.isConnected) root.scrollTop += anchor.getBoundingClientRect().top - anchorTop;
      if (root.scrollHeight > beforeHeight && !atBottom()) jump.hidden = false;
    }
  }

  function firstVisible() {
    const top = root.getBoundingClientRect().top;
    for (const el of items.children) if (el.getBoundingClientRect().bottom > top) return el;
    return null;
  }

  return { render, scrollToBottom };
}

function isPlan(m) {
  return m.role === 'agent' && (m.kind === 'notice') && !!parsePlan(messageText(m));
}

function promptOf(msgs, turnId) {
  const m = msgs.find((x) => x.turnId === turnId && x.role === 'user');
  return m ? messageText(m) : '';
}

// ---------- rich text (plain text + ``` fenced code) ----------

function richText() {
  const el = h('div', { class: 'rich' });
  let last = null;
  return {
    el,
    set(text) {
      if (text === last) return;
      last = text;
      const parts = splitFences(text);
      const kids = [...el.children];
      parts.forEach((p, i) => {
        let node = kids[i];
        if (!node || node.dataset.type !== p.type) {
          node = p.type === 'code'
            ? h('div', { class: 'code-block', dataset: { type: 'code' } }, h('div', { class: 'code-lang' }), h('pre', null, h('code')))
            : h('div', { class: 'text-seg', dataset: { type: 'text' } });
          if (kids[i]) el.replaceChild(node, kids[i]);
          else el.appendChild(node);
          kids[i] = node;
        }
        if (p.type === 'code') {
          const lang = node.querySelector('.code-lang');
          setText(lang, p.lang);
          lang.hidden = !p.lang;
          setText(node.querySelector('code'), p.text);
        } else {
          setText(node, p.text);
        }
      });
      for (let i = parts.length; i < kids.length; i++) kids[i].remove();
    },
  };
}

// ---------- message views ----------

function header() {
  const avatar = h('span', { class: 'avatar' });
  const author = h('span', { class: 'author' });
  const version = h('span', { class: 'agent-version' });
  const badge = h('span', { class: 'badge badge-sim', text: 'simulated', title: 'The built-in sim agent: scripted output, no model' });
  const goalBadge = h('span', { class: 'badge badge-goal' });
  const time = h('time', { class: 'msg-time' });
  const el = h('header', { class: 'msg-head' }, avatar, author, version, badge, goalBadge, time);
  return {
    el,
    set({ name, avatarText, sim, at, you, hue, agentVersion, goal }) {
      // A goal turn's prompt is the server's, on behalf of the goal.
      setText(goalBadge, goal ? `goal turn ${goal.number}${goal.kind === 'goal_arm' ? ' · armed' : ''}` : '');
      goalBadge.hidden = !goal;
      setText(avatar, avatarText);
      if (hue != null) avatar.style.setProperty('--hue', String(hue));
      setText(author, name);
      setText(version, agentVersion ? `v${agentVersion}` : '');
      version.hidden = !agentVersion;
      author.classList.toggle('you', !!you);
      badge.hidden = !sim;
      setText(time, clockTime(at));
      setAttr(time, 'datetime', at || null);
      setAttr(time, 'title', at ? new Date(at).toLocaleString() : null);
    },
  };
}

// authorName: the agent as the turn recorded it; people by the display
// name recorded at admission (never a raw id when a name is known).
function authorName(m, ctx) {
  if (m.role === 'agent') {
    const a = ctx.agent || { name: 'Agent' };
    return { name: a.name, avatarText: '✦', sim: a.simulated, agentVersion: a.version };
  }
  if (m.role === 'system') return { name: 'System', avatarText: 'i' };
  const me = ctx.principal && m.author && m.author === ctx.principal.id;
  if (me) return { name: ctx.principal.name || 'You', avatarText: initials(ctx.principal.name), you: true };
  const name = authorLabel(m, ctx.turn, ctx.names);
  return { name, avatarText: initials(name), hue: hueOf(m.author || name) };
}

// hueOf gives each collaborator a stable avatar colour.
export function hueOf(s) {
  let x = 0;
  for (let i = 0; i < s.length; i++) x = (x * 31 + s.charCodeAt(i)) >>> 0;
  return x % 360;
}

function messageView(m) {
  if (m.kind === 'tool_call') return toolView();
  if (m.kind === 'thought') return thoughtView();
  if (m.kind === 'notice' || m.role === 'system') return noticeView();
  return textView(m.role === 'user' ? 'user' : 'agent');
}

function tagMessage(el, m) {
  setAttr(el, 'data-message-id', m.id);
  setAttr(el, 'data-role', m.role);
  setAttr(el, 'data-kind', m.kind || 'text');
  setAttr(el, 'data-turn-id', m.turnId || null);
  setAttr(el, 'data-streaming', m.streaming ? 'true' : 'false');
}

function textView(side) {
  const head = header();
  // Agent output is markdown; what people typed is shown as they typed it.
  const body = side === 'agent' ? markdownView() : richText();
  const caret = h('span', { class: 'caret', 'aria-hidden': 'true' });
  const bubble = h('div', { class: 'msg-body' }, body.el, caret);
  const el = h('article', { class: `msg msg-${side}` }, head.el, bubble);
  return {
    el,
    update(m, ctx) {
      tagMessage(el, m);
      const who = authorName(m, ctx);
      const goal = m.role === 'user' && ctx.turn && ctx.turn.goal;
      head.set({ ...who, at: m.createdAt, goal });
      el.classList.toggle('goal-turn', !!goal);
      el.classList.toggle('mine', !!who.you);
      el.classList.toggle('other', m.role === 'user' && !who.you);
      el.classList.toggle('continued', !!ctx.continued);
      const text = messageText(m);
      // A finished message paints with the status that ends it, never a
      // frame after (the status is set synchronously in this same pass).
      body.set(text, { now: !m.streaming });
      caret.hidden = !(m.streaming && !text);
      el.classList.toggle('is-empty', !text && !!m.streaming);
    },
  };
}

function thoughtView() {
  const head = header();
  const label = h('span', { class: 'thought-label' });
  const preview = h('span', { class: 'thought-preview' });
  const body = markdownView();
  const details = h('details', { class: 'thought' },
    h('summary', null, icon('think'), label, preview),
    h('div', { class: 'thought-body' }, body.el));
  const el = h('article', { class: 'msg msg-agent msg-thought' }, head.el, details);
  return {
    el,
    update(m, ctx) {
      tagMessage(el, m);
      head.set({ ...authorName(m, ctx), at: m.createdAt });
      el.classList.toggle('continued', !!ctx.continued);
      const text = messageText(m);
      setText(label, m.streaming ? 'Thinking…' : 'Thought');
      const first = text.trim().split('\n')[0] || '';
      setText(preview, first.length > 90 ? first.slice(0, 90) + '…' : first);
      body.set(text, { now: !m.streaming });
    },
  };
}

const TOOL_ICONS = { read: 'read', edit: 'edit', delete: 'edit', move: 'edit', execute: 'terminal', search: 'search', fetch: 'search', think: 'think' };

function toolView() {
  const head = header();
  const ic = h('span', { class: 'tool-icon' });
  const title = h('span', { class: 'tool-title' });
  const kind = h('span', { class: 'tool-kind' });
  const status = h('span', { class: 'badge tool-status' });
  const outPre = h('pre', { class: 'tool-output-text' });
  const out = h('details', { class: 'tool-output' }, h('summary', null, 'Output'), outPre);
  const inPre = h('pre', { class: 'tool-input-text' });
  const input = h('details', { class: 'tool-input' }, h('summary', null, 'Input'), inPre);
  const text = markdownView();
  const diffs = diffSlot('tool-diffs');
  const card = h('div', { class: 'tool-card' },
    h('div', { class: 'tool-head' }, ic, title, kind, status), text.el, diffs.el, input, out);
  const el = h('article', { class: 'msg msg-agent msg-tool' }, head.el, card);
  let iconName = '';
  return {
    el,
    update(m, ctx) {
      tagMessage(el, m);
      head.set({ ...authorName(m, ctx), at: m.createdAt });
      el.classList.toggle('continued', !!ctx.continued);
      const t = m.tool || {};
      const want = TOOL_ICONS[t.kind] || 'tool';
      if (want !== iconName) { ic.replaceChildren(icon(want)); iconName = want; }
      setText(title, t.title || messageText(m).split('\n')[0] || 'Tool call');
      setText(kind, t.kind || '');
      kind.hidden = !t.kind;
      const st = t.status || (m.streaming ? 'in_progress' : 'completed');
      setText(status, st.replace(/_/g, ' '));
      setAttr(card, 'data-status', st);
      setAttr(el, 'data-tool-status', st);
      const body = messageText(m);
      const showBody = body && body !== (t.title || '');
      text.el.hidden = !showBody;
      if (showBody) text.set(body, { now: !m.streaming });
      const inputText = t.input == null ? '' : (typeof t.input === 'string' ? t.input : JSON.stringify(t.input, null, 2));
      setText(inPre, inputText);
      input.hidden = !inputText || inputText === '{}' || inputText === 'null';
      setText(outPre, t.output || '');
      out.hidden = !t.output;
      diffs.set(t.diffs);
    },
  };
}

// planMessageView is an ACP plan: a checklist, updated in place as the
// agent reports progress.
function planMessageView() {
  const head = header();
  const plan = planView();
  const el = h('article', { class: 'msg msg-agent msg-plan' }, head.el, plan.el);
  return {
    el,
    update(m, ctx) {
      tagMessage(el, m);
      setAttr(el, 'data-kind', 'plan');
      head.set({ ...authorName(m, ctx), at: m.createdAt });
      plan.set(parsePlan(messageText(m)) || []);
    },
  };
}

function noticeView() {
  const text = richText();
  const time = h('time', { class: 'msg-time' });
  const el = h('article', { class: 'msg msg-notice' }, icon('info'), text.el, time);
  return {
    el,
    update(m) {
      tagMessage(el, m);
      text.set(messageText(m));
      setText(time, clockTime(m.createdAt));
    },
  };
}

// ---------- turn status ----------

function turnStatusView(handlers) {
  const spin = h('span', { class: 'spinner', 'aria-hidden': 'true' });
  const label = h('span', { class: 'turn-label' });
  const detail = h('span', { class: 'turn-detail' });
  const retry = h('button', { type: 'button', class: 'btn btn-small btn-secondary turn-retry', text: 'Retry this prompt' });
  // Fork (views/fork.js decides where the agent attests it).
  const fork = h('button', { type: 'button', class: 'btn btn-small btn-secondary turn-fork', text: 'Fork', hidden: true });
  const el = h('div', { class: 'turn-status' }, spin, label, detail, retry, fork);
  let prompt = '';
  let turn = null;
  retry.addEventListener('click', () => handlers.onRetryPrompt(prompt));
  fork.addEventListener('click', () => { if (turn && handlers.onFork) handlers.onFork(turn); });
  return {
    el,
    update(t, isActive, ctx = {}) {
      const st = turnStatus(t, { meId: ctx.principal && ctx.principal.id, offline: ctx.connected === false });
      prompt = ctx.prompt || '';
      retry.hidden = !(st.tone === 'error' && prompt && ctx.canPrompt);
      setAttr(el, 'data-turn-id', t.id);
      setAttr(el, 'data-phase', t.phase || '');
      setAttr(el, 'data-outcome', t.outcome || '');
      setAttr(el, 'data-tone', st.tone);
      setAttr(el, 'data-active', st.active && isActive !== false ? 'true' : 'false');
      spin.hidden = !st.active;
      setText(label, st.label);
      setText(detail, st.detail || '');
      detail.hidden = !st.detail;
      turn = t;
      const fi = handlers.forkInfo ? handlers.forkInfo(t) : { show: false };
      fork.hidden = !fi.show;
      fork.disabled = !!fi.disabled;
      setText(fork, fi.busy ? 'Forking…' : 'Fork');
      setAttr(fork, 'title', fi.show ? fi.title : null);
      setAttr(el, 'data-fork-reason', fi.reason || null);
      const settled = t.settledAt ? `settled ${new Date(t.settledAt).toLocaleString()}` : '';
      setAttr(el, 'title', [settled, !fi.show && fi.title ? fi.title : ''].filter(Boolean).join('\n') || null);
    },
  };
}

// ---------- interactions (approval / question / plan) ----------

const KIND_TITLE = {
  approval: 'The agent asks for permission',
  question: 'The agent has a question',
  plan: 'The agent proposes a plan',
};

// interactionView is one request the agent waits on. Every watcher of the
// tree sees the same card; the first answer wins and everyone sees who
// gave it. A response that lost the race is explained, not an error.
function interactionView(handlers) {
  const kind = h('span', { class: 'interaction-kind' });
  const from = h('span', { class: 'interaction-from' });
  const title = h('div', { class: 'interaction-title' });
  const prompt = richText();
  const toolLine = h('div', { class: 'interaction-tool' });
  const inPre = h('pre', { class: 'tool-input-text' });
  const input = h('details', { class: 'tool-input' }, h('summary', null, 'Details'), inPre);
  const diffs = diffSlot('interaction-diffs');
  const options = h('div', { class: 'interaction-options' });
  const why = h('div', { class: 'interaction-why' });
  const note = h('input', { class: 'interaction-note', type: 'text', maxlength: '2000',
    placeholder: 'Optional note for the agent (sent with a decline)', 'aria-label': 'Note for the agent' });
  const status = h('div', { class: 'interaction-status', role: 'status' });
  const mine = h('div', { class: 'interaction-mine' });
  const err = h('div', { class: 'inline-error', role: 'alert' });
  const el = h('div', { class: 'interaction' },
    h('div', { class: 'interaction-head' }, icon('key'), kind, from), title, prompt.el, toolLine, diffs.el, input, options, why, note, status, mine, err);
  let lastKey = '';
  let current = null;
  let busy = false;
  return {
    el,
    update(it, { open, rootTurnId, rootSettled, ctx, tool }) {
      current = it;
      const requestId = it.requestId || it.id;
      const state = it.state || 'pending';
      const open_ = actionable(open, rootTurnId, it);
      // A role that cannot answer sees the buttons disabled, with why.
      const canAnswer = open_ && ctx.canAnswer;
      setAttr(el, 'data-request-id', requestId);
      setAttr(el, 'data-turn-id', it.turnId || '');
      setAttr(el, 'data-session-id', it.sessionId || '');
      setAttr(el, 'data-kind', it.kind || 'approval');
      setAttr(el, 'data-state', state);
      setAttr(el, 'data-actionable', canAnswer ? 'true' : 'false');
      setAttr(el, 'data-answered-by', it.answeredByName || it.answeredBy || null);
      setText(kind, KIND_TITLE[it.kind] || 'The agent needs an answer');
      const sub = it.sessionId && open && it.sessionId !== open.id;
      setText(from, sub ? 'sub-agent' : '');
      from.hidden = !sub;
      setText(title, it.title || '');
      title.hidden = !it.title || it.title === it.prompt;
      prompt.set(it.prompt || '');
      prompt.el.hidden = !it.prompt;
      // The tool's live status comes from its tool-call message, when known.
      const t = { ...(it.tool || {}), ...(tool ? { status: tool.status || (it.tool || {}).status } : {}) };
      setAttr(el, 'data-tool-status', t.status || null);
      const toolText = [t.kind, t.title && t.title !== it.title ? t.title : '', t.status ? t.status.replace(/_/g, ' ') : ''].filter(Boolean).join(' · ');
      setText(toolLine, toolText ? `Tool call: ${toolText}` : '');
      toolLine.hidden = !toolText;
      const inputText = t.input == null ? '' : (typeof t.input === 'string' ? t.input : JSON.stringify(t.input, null, 2));
      setText(inPre, inputText);
      input.hidden = !inputText || inputText === '{}' || inputText === 'null';
      diffs.set(t.diffs);
      // The diff is what is approved: the raw input is then detail only.
      if (t.diffs && t.diffs.length) input.hidden = true;
      setText(why, open_ && !ctx.canAnswer ? ctx.answerBlocked || 'Your role cannot answer this.' : '');
      why.hidden = !why.textContent;
      const opts = it.options || [];
      const key = JSON.stringify([canAnswer, opts, it.response || null]);
      if (key !== lastKey) {
        lastKey = key;
        options.replaceChildren(...opts.map((o) => {
          const id = o.optionId || o.id;
          const chosen = it.response && it.response.optionId === id;
          const b = h('button', {
            type: 'button',
            class: `btn btn-small ${/^reject/.test(o.kind || '') ? 'btn-ghost' : 'btn-secondary'}${chosen ? ' chosen' : ''}`,
            dataset: { optionId: id, optionKind: o.kind || '' }, text: o.name || id,
          });
          b.disabled = !canAnswer || busy;
          if (open_ && !ctx.canAnswer) b.title = ctx.answerBlocked || '';
          b.addEventListener('click', () => answer(id, /^reject/.test(o.kind || '')));
          return b;
        }));
      }
      note.hidden = !canAnswer || !opts.some((o) => /^reject/.test(o.kind || ''));
      const st = interactionStatus(it, rootSettled);
      setText(status, st ? st.text : '');
      setAttr(status, 'data-tone', st ? st.tone : null);
      status.hidden = !st;
      mine.hidden = !mine.textContent;
    },
  };

  async function answer(optionId, denial) {
    if (!current || busy) return;
    const it = current;
    busy = true;
    for (const x of options.querySelectorAll('button')) x.disabled = true;
    setText(err, '');
    setText(mine, '');
    const payload = denial && note.value.trim() ? { message: note.value.trim() } : undefined;
    try {
      const res = await handlers.onRespond({
        sessionId: it.sessionId, turnId: it.turnId, requestId: it.requestId || it.id, optionId, payload,
      });
      setText(mine, respondNote(res, optionId));
    } catch (e) {
      setText(err, errorLine(e));
    } finally {
      busy = false;
      lastKey = '';
      mine.hidden = !mine.textContent;
      for (const x of options.querySelectorAll('button')) x.disabled = !(current && (current.state || 'pending') === 'pending');
    }
  }
}

// ---------- pending submissions ----------

function pendingView(handlers) {
  const head = header();
  const body = richText();
  const line = h('div', { class: 'pending-status' });
  const retry = h('button', { type: 'button', class: 'btn btn-small btn-secondary', text: 'Retry' });
  const discard = h('button', { type: 'button', class: 'btn btn-small btn-ghost', text: 'Discard' });
  const actions = h('span', { class: 'pending-actions' }, retry, discard);
  const el = h('article', { class: 'msg msg-user msg-pending' }, head.el, h('div', { class: 'msg-body' }, body.el), line, actions);
  let current = null;
  retry.addEventListener('click', () => current && handlers.onRetryPending(current.clientSubmitId));
  discard.addEventListener('click', () => current && handlers.onDiscardPending(current.clientSubmitId));
  return {
    el,
    update(p, ctx) {
      current = p;
      setAttr(el, 'data-pending-id', p.clientSubmitId);
      setAttr(el, 'data-status', p.status);
      const me = ctx.principal || {};
      head.set({ name: me.name || 'You', avatarText: initials(me.name), you: true, at: new Date(p.createdAt).toISOString() });
      body.set(p.text);
      let msg;
      if (p.status === 'failed' && p.error) msg = errorLine(p.error);
      else if (p.status === 'waiting' || (p.status === 'sending' && !ctx.connected)) msg = 'Waiting for the connection… it goes out once it is back, never twice.';
      else if (p.sessionId === '') msg = 'Starting a new session…';
      else msg = 'sending…';
      setText(line, msg);
      line.classList.toggle('inline-error', p.status === 'failed');
      actions.hidden = !(p.status === 'failed' || p.status === 'waiting');
    },
  };
}

// ---------- empty and error states ----------

// hints are the sim agent's directives; they show only while the server
// runs the sim agent (update() re-checks once the connection says so).
function hints(handlers, intro) {
  const el = h('div', { class: 'hints-box' }, h('p', { class: 'hint-intro' }, intro), hintList(handlers));
  return { el, update() { el.hidden = !handlers.isSim(); } };
}

function hintList(handlers) {
  return h('ul', { class: 'hints' }, SIM_HINTS.map((x) => h('li', null,
    h('button', { type: 'button', class: 'hint-chip', dataset: { hint: x.cmd }, onclick: () => handlers.onHint(x.cmd) }, h('code', null, x.cmd)),
    h('span', { class: 'hint-what' }, x.what))));
}

function welcomeView(handlers) {
  const hb = hints(handlers, 'This server runs the built-in sim agent (no AI model). It understands:');
  const el = h('section', { class: 'empty-state', id: 'welcome' },
    h('div', { class: 'empty-mark' }, icon('logo', 'icon icon-xl')),
    h('h2', null, 'Start a session'),
    h('p', null, 'Type what you want the agent to do below and press Enter — that starts a new session everyone in this workspace can watch and join. Or pick a session from the list to follow it live.'),
    hb.el);
  return { el, update: hb.update };
}

function emptySessionView(handlers) {
  const hb = hints(handlers, 'The sim agent understands:');
  const el = h('section', { class: 'empty-state compact' },
    h('h2', null, 'Nothing here yet'),
    h('p', null, 'Send the first message below to get the agent started. Everyone in the workspace sees it live.'),
    hb.el);
  return { el, update: hb.update };
}

function loadingView() {
  const el = h('div', { class: 'loading-state', 'aria-busy': 'true' },
    h('div', { class: 'skeleton w60' }), h('div', { class: 'skeleton w80' }), h('div', { class: 'skeleton w40' }));
  return { el, update() {} };
}

function errorView() {
  const title = h('strong');
  const msg = h('span');
  const el = h('div', { class: 'error-card', role: 'alert' }, icon('alert'), h('div', null, title, h('br'), msg));
  return {
    el,
    update(err, what) {
      setText(title, what);
      setText(msg, errorLine(err));
    },
  };
}

function earlierView(handlers) {
  const btn = h('button', { type: 'button', class: 'btn btn-ghost btn-small', id: 'load-earlier', onclick: () => handlers.onLoadEarlier() }, 'Load earlier messages');
  const el = h('div', { class: 'earlier' }, btn);
  return {
    el,
    update(loading) {
      btn.disabled = !!loading;
      setText(btn, loading ? 'Loading…' : 'Load earlier messages');
    },
  };
}

// deletedView is the notice on a session deleted while open, with Restore
// for members (viewers only read it). The restore's session_summary clears
// the notice for everyone watching; a refused restore (a sub-agent deleted
// with its parent, a purge meanwhile) says why here.
function deletedView(handlers) {
  const text = h('span', { class: 'banner-text' });
  const err = h('span', { class: 'banner-error', role: 'alert' });
  const btn = h('button', { class: 'btn btn-secondary btn-small', type: 'button', id: 'restore-deleted', text: 'Restore' });
  let id = '';
  btn.addEventListener('click', async () => {
    btn.disabled = true;
    setText(err, '');
    try {
      await handlers.onRestoreDeleted(id);
    } catch (e) {
      setText(err, errorLine(e));
    } finally {
      btn.disabled = false;
    }
  });
  const el = h('div', { class: 'banner banner-deleted' }, icon('alert'), text, btn, err);
  return {
    el,
    update(sessionId, canRestore, purged) {
      if (sessionId !== id) setText(err, '');
      id = sessionId;
      setText(text, purged
        ? 'This session was purged for good. What is shown here is all that is left, and only until you leave it.'
        : 'This session was deleted. Its transcript is read-only until someone restores it.');
      btn.hidden = !canRestore || purged;
    },
  };
}

function noteView(ic) {
  const text = h('span');
  const el = h('div', { class: 'banner' }, icon(ic), text);
  return { el, update(t) { setText(text, t); } };
}
