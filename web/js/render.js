// Rendered agent output, with maintained libraries vendored as ES modules
// (web/vendor, see scripts/refresh-web-vendor.sh): markdown by marked,
// sanitized by DOMPurify before it touches the DOM; code highlighted by
// highlight.js with a copy button; ACP diffs as unified diffs by jsdiff;
// ACP plans as a checklist. Nothing here parses markdown by hand.

import { Marked } from '../vendor/marked/marked.esm.js';
import DOMPurify from '../vendor/dompurify/purify.es.mjs';
import hljs from '../vendor/highlight/highlight.min.js';
import { structuredPatch } from '../vendor/diff/index.js';
import { h } from './dom.js';

const marked = new Marked({ gfm: true, breaks: false, async: false });

// Links open in a new tab without handing it this window.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.getAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

// markdownFragment turns agent markdown into sanitized DOM.
export function markdownFragment(text) {
  const html = marked.parse(text || '');
  const frag = DOMPurify.sanitize(html, {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe'],
    FORBID_ATTR: ['style'],
  });
  for (const pre of frag.querySelectorAll('pre')) decorateCode(pre);
  return frag;
}

// decorateCode highlights one <pre><code> block and adds its toolbar.
function decorateCode(pre) {
  const code = pre.querySelector('code');
  if (!code) return;
  const lang = [...code.classList].find((c) => c.startsWith('language-'))?.slice(9) || '';
  const source = code.textContent;
  try {
    const res = lang && hljs.getLanguage(lang)
      ? hljs.highlight(source, { language: lang, ignoreIllegals: true })
      : hljs.highlightAuto(source);
    // highlight.js escapes the source; its output is spans and text only.
    code.innerHTML = DOMPurify.sanitize(res.value, { ALLOWED_TAGS: ['span'], ALLOWED_ATTR: ['class'] });
    code.classList.add('hljs');
  } catch { /* leave it plain */ }
  const copy = h('button', { type: 'button', class: 'code-copy btn btn-ghost btn-small', 'aria-label': 'Copy code', text: 'Copy' });
  copy.addEventListener('click', () => copyText(source, copy));
  const bar = h('div', { class: 'code-bar' }, h('span', { class: 'code-lang', text: lang || 'code' }), copy);
  const block = h('div', { class: 'code-block', dataset: { lang } });
  pre.replaceWith(block);
  block.append(bar, pre);
}

export async function copyText(text, button) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    // Not a secure context (plain http on a LAN address): the old way.
    const ta = h('textarea', { class: 'sr-only', 'aria-hidden': 'true' });
    ta.value = text;
    document.body.appendChild(ta);
    ta.select();
    try { ok = document.execCommand('copy'); } catch { ok = false; }
    ta.remove();
  }
  if (button) {
    button.textContent = ok ? 'Copied' : 'Copy failed';
    button.dataset.copied = ok ? 'true' : 'false';
    setTimeout(() => { button.textContent = 'Copy'; delete button.dataset.copied; }, 1500);
  }
  return ok;
}

// markdownView keeps one element in sync with streaming markdown. It
// re-renders at most once per animation frame while text streams; set with
// now paints at once (a finished message, shown with its final status).
export function markdownView(cls = 'rich markdown') {
  const el = h('div', { class: cls });
  let last = null;
  let queued = null;
  function paint() {
    const t = queued;
    queued = null;
    // null: an immediate set already painted what this frame was for.
    if (t === null || t === last) return;
    last = t;
    el.replaceChildren(markdownFragment(t));
  }
  return {
    el,
    set(text, { now = false } = {}) {
      if (text === last && queued === null) return;
      if (now || last === null) { queued = text; paint(); return; }
      const pending = queued !== null;
      queued = text;
      if (!pending) requestAnimationFrame(paint);
    },
  };
}

// diffView renders file edits as coloured unified diffs.
export function diffView(diffs) {
  return h('div', { class: 'diffs' }, (diffs || []).map((d) => {
    const oldText = d.oldText == null ? '' : d.oldText;
    const patch = structuredPatch(d.path, d.path, oldText, d.newText || '', '', '', { context: 3 });
    let added = 0;
    let removed = 0;
    const rows = [];
    for (const hunk of patch.hunks) {
      rows.push(h('div', { class: 'diff-line diff-hunk', text: `@@ -${hunk.oldStart},${hunk.oldLines} +${hunk.newStart},${hunk.newLines} @@` }));
      for (const line of hunk.lines) {
        const sign = line[0];
        if (sign === '\\') continue; // "\ No newline at end of file"
        const kind = sign === '+' ? 'add' : sign === '-' ? 'del' : 'ctx';
        if (kind === 'add') added++;
        if (kind === 'del') removed++;
        rows.push(h('div', { class: `diff-line diff-${kind}` },
          h('span', { class: 'diff-sign', 'aria-hidden': 'true', text: sign === ' ' ? ' ' : sign }),
          h('span', { class: 'sr-only', text: kind === 'add' ? 'added: ' : kind === 'del' ? 'removed: ' : '' }),
          h('span', { class: 'diff-text', text: line.slice(1) })));
      }
    }
    return h('div', { class: 'diff', dataset: { path: d.path } },
      h('div', { class: 'diff-head' },
        h('span', { class: 'diff-path', text: d.path }),
        h('span', { class: 'diff-stat' },
          h('span', { class: 'diff-stat-add', text: `+${added}` }), ' ',
          h('span', { class: 'diff-stat-del', text: `−${removed}` })),
        d.oldText == null ? h('span', { class: 'badge', text: 'new file' }) : null),
      h('div', { class: 'diff-body', role: 'table', 'aria-label': `Changes to ${d.path}` }, rows));
  }));
}

// diffSlot is a place for a tool's diffs, re-rendered only when they change.
export function diffSlot(cls) {
  const el = h('div', { class: cls });
  let key = '';
  return {
    el,
    set(diffs) {
      const k = JSON.stringify(diffs || []);
      if (k !== key) {
        key = k;
        el.replaceChildren(...(diffs && diffs.length ? [diffView(diffs)] : []));
      }
      el.hidden = !(diffs && diffs.length);
    },
  };
}

// parsePlan reads a plan notice ("Plan:" then "- [x] step" lines, the
// runtime's rendering of an ACP plan) into entries; null if it is not one.
export function parsePlan(text) {
  const lines = (text || '').split('\n');
  if (lines[0].trim() !== 'Plan:') return null;
  const entries = [];
  for (const l of lines.slice(1)) {
    const m = /^\s*- \[([ x~])\] (.*)$/.exec(l);
    if (m) entries.push({ status: m[1] === 'x' ? 'completed' : m[1] === '~' ? 'in_progress' : 'pending', text: m[2] });
  }
  return entries.length ? entries : null;
}

const PLAN_MARK = { completed: '✓', in_progress: '◐', pending: '○' };
const PLAN_WORD = { completed: 'done', in_progress: 'in progress', pending: 'to do' };

// planView renders plan entries as a checklist, updated in place.
export function planView() {
  const list = h('ol', { class: 'plan-list' });
  const progress = h('span', { class: 'plan-progress' });
  const el = h('div', { class: 'plan-card' }, h('div', { class: 'plan-head' }, h('strong', { text: 'Plan' }), progress), list);
  let key = '';
  return {
    el,
    set(entries) {
      const k = JSON.stringify(entries);
      if (k === key) return;
      key = k;
      const done = entries.filter((e) => e.status === 'completed').length;
      progress.textContent = `${done} of ${entries.length} done`;
      list.replaceChildren(...entries.map((e) => h('li', { class: `plan-item plan-${e.status}`, dataset: { status: e.status } },
        h('span', { class: 'plan-mark', 'aria-hidden': 'true', text: PLAN_MARK[e.status] }),
        h('span', { class: 'plan-text', text: e.text }),
        h('span', { class: 'sr-only', text: ` (${PLAN_WORD[e.status]})` }))));
    },
  };
}
