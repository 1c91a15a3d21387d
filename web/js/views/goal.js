// The goal bar: the open session's goal (objective, status, revision,
// goal turns used of the budget, who set or paused it) and, for members,
// set / pause / resume / clear. The goal state comes from the session
// snapshot's `goal` and from `goal_state` events; a state is applied only
// when its seq is higher than the one held (or equal and newly held: a
// delete or import holds the goal without changing it), so a late or
// duplicate event never moves the bar backwards.

import { h, setText } from '../dom.js';

const STATUS_LABEL = {
  active: 'active', paused: 'paused', achieved: 'achieved', failed: 'failed',
  budget_exhausted: 'budget used up', cleared: 'cleared',
};

// applyGoalState keeps the newest goal state on the open session; it
// reports whether anything changed.
export function applyGoalState(open, gs) {
  if (!open || !gs || gs.sessionId !== open.id) return false;
  const cur = open.goal;
  if (cur && (cur.seq || 0) > (gs.seq || 0)) return false;
  if (cur && (cur.seq || 0) === (gs.seq || 0) && (cur.held || !gs.held)) return false;
  open.goal = gs;
  return true;
}

function budgetText(g) {
  const max = g.maxTurns || 10;
  return `${g.turnsUsed || 0} of ${max} turns`;
}

export function createGoalBar(el, { onControl }) {
  const label = h('span', { class: 'goal-label', text: 'Goal' });
  const objective = h('span', { class: 'goal-objective' });
  const status = h('span', { class: 'goal-status' });
  const meta = h('span', { class: 'goal-meta' });
  const who = h('span', { class: 'goal-who' });
  const pause = h('button', { class: 'btn btn-small goal-pause', type: 'button', text: 'Pause' });
  const resume = h('button', { class: 'btn btn-small goal-resume', type: 'button', text: 'Resume' });
  const clear = h('button', { class: 'btn btn-small goal-clear', type: 'button', text: 'Clear' });
  const setBtn = h('button', { class: 'btn btn-small goal-set', type: 'button', text: 'Set goal' });
  const err = h('span', { class: 'goal-error', role: 'alert' });
  const input = h('textarea', { class: 'goal-input', rows: '1', maxlength: '8000', placeholder: 'Objective the agent should pursue…', 'aria-label': 'Goal objective' });
  const turns = h('input', { class: 'goal-turns', type: 'number', min: '1', max: '100', value: '10', 'aria-label': 'Maximum goal turns', title: 'Maximum goal turns' });
  const save = h('button', { class: 'btn btn-small btn-primary goal-save', type: 'submit', text: 'Start goal' });
  const cancel = h('button', { class: 'btn btn-small goal-cancel', type: 'button', text: 'Cancel' });
  const form = h('form', { class: 'goal-form' }, input, turns, save, cancel);
  const row = h('div', { class: 'goal-row' }, label, objective, status, meta, who, pause, resume, clear, setBtn);
  el.replaceChildren(row, form, err);
  form.hidden = true;

  let busy = false;
  async function control(action, goal) {
    if (busy) return;
    busy = true;
    setText(err, '');
    try {
      await onControl(action, goal);
      form.hidden = true;
    } catch (e) {
      setText(err, (e && e.message) || String(e));
    } finally {
      busy = false;
    }
  }
  pause.onclick = () => control('pause');
  resume.onclick = () => control('resume');
  clear.onclick = () => control('clear');
  setBtn.onclick = () => { form.hidden = false; input.focus(); };
  cancel.onclick = () => { form.hidden = true; };
  form.onsubmit = (e) => {
    e.preventDefault();
    const objectiveText = input.value.trim();
    if (!objectiveText) return;
    const max = parseInt(turns.value, 10);
    control('set', { objective: objectiveText, ...(max > 0 ? { maxTurns: max } : {}) }).then(() => {
      if (form.hidden) input.value = '';
    });
  };

  return {
    render(open, { canControl, connected }) {
      el.hidden = !open;
      if (!open) return;
      const gs = open.goal;
      const g = gs && gs.goal;
      el.dataset.status = g ? g.status : 'none';
      el.dataset.revision = gs ? String(gs.revision || 0) : '0';
      setText(objective, g ? g.objective.replace(/^\/sim[^\n]*\n/, '') : 'No goal');
      objective.title = g ? g.objective : '';
      objective.classList.toggle('none', !g);
      status.hidden = !g;
      setText(status, g ? STATUS_LABEL[g.status] || g.status : '');
      status.dataset.status = g ? g.status : '';
      meta.hidden = !gs || !gs.revision;
      setText(meta, g ? `rev ${gs.revision} · ${budgetText(g)}` : gs && gs.revision ? `rev ${gs.revision}` : '');
      let whoText = '';
      // held: an active goal restored from the Trash or imported waits for
      // a person's resume (restore starts no agent).
      if (g && g.status === 'active' && gs.held) whoText = 'waiting for resume';
      else if (g && g.status === 'paused' && g.pausedByName) whoText = `paused by ${g.pausedByName}`;
      else if (g && g.source === 'provider') whoText = 'set by the agent';
      else if (g && g.setByName) whoText = `set by ${g.setByName}`;
      if (g && g.endReason && g.status !== 'active' && !(g.status === 'paused' && g.pausedByName)) {
        whoText += (whoText ? ' · ' : '') + g.endReason.replace(/_/g, ' ');
      }
      setText(who, whoText);
      who.hidden = !whoText;
      // Control lost (the session was deleted): an open goal form closes.
      if (!canControl) form.hidden = true;
      const can = canControl && connected && !busy;
      pause.hidden = !canControl || !g || g.status !== 'active';
      resume.hidden = !canControl || !g || !(g.status === 'paused' || (g.status === 'active' && gs.held));
      clear.hidden = !canControl || !g;
      setBtn.hidden = !canControl || !form.hidden;
      setText(setBtn, g && (g.status === 'active' || g.status === 'paused') ? 'Replace' : 'Set goal');
      for (const b of [pause, resume, clear, setBtn, save]) b.disabled = !can;
    },
  };
}
