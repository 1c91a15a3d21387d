// The composer: a growing textarea (Enter sends, Shift+Enter adds a line),
// Send, and Stop while a turn is running. Errors show inline under it.

import { setText, setAttr } from '../dom.js';
import { errorLine } from '../explain.js';

export function createComposer(root, { onSubmit, onStop, onEdit }) {
  const form = root; // <form id="composer">
  const ta = form.querySelector('textarea');
  const send = form.querySelector('#send');
  const stop = form.querySelector('#stop');
  const status = form.querySelector('#composer-status');
  const note = form.querySelector('#composer-note');
  let composing = false;

  function grow() {
    ta.style.height = 'auto';
    ta.style.height = Math.min(ta.scrollHeight, 280) + 'px';
  }

  function submit() {
    const text = ta.value;
    if (!text.trim() || blocked) return;
    onSubmit(text);
  }

  ta.addEventListener('compositionstart', () => { composing = true; });
  ta.addEventListener('compositionend', () => { composing = false; });
  ta.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.altKey && !composing && !e.isComposing) {
      e.preventDefault();
      submit();
    }
  });
  // Some input paths (IME, synthetic key events) deliver the line break
  // separately from keydown; drop it unless Shift is held.
  let shiftHeld = false;
  ta.addEventListener('keyup', (e) => { shiftHeld = e.shiftKey; });
  ta.addEventListener('keydown', (e) => { shiftHeld = e.shiftKey; }, true);
  ta.addEventListener('beforeinput', (e) => {
    if ((e.inputType === 'insertLineBreak' || e.inputType === 'insertParagraph') && !shiftHeld && !composing) {
      e.preventDefault();
    }
  });
  ta.addEventListener('input', () => {
    grow();
    updateSend();
    if (onEdit) onEdit();
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submit();
  });
  stop.addEventListener('click', () => onStop());

  let blocked = false;
  function updateSend() {
    // Send stays clickable when empty (a no-op) so scripted input that
    // bypasses input events still works; it only looks dimmed.
    send.disabled = blocked;
    send.classList.toggle('is-empty', !ta.value.trim());
  }

  const api = {
    el: form,
    get text() { return ta.value; },
    setText(t) {
      ta.value = t;
      grow();
      updateSend();
    },
    clear() { api.setText(''); },
    focus() { ta.focus(); },
    insert(t) {
      api.setText(t);
      ta.focus();
      ta.setSelectionRange(t.length, t.length);
    },
    // showError(err) shows "code: message" inline; null clears it.
    showError(err) {
      if (!err) {
        setText(status, '');
        status.hidden = true;
        return;
      }
      setText(status, typeof err === 'string' ? err : errorLine(err));
      setAttr(status, 'data-code', err.code || null);
      status.hidden = false;
    },
    showNote(text) {
      setText(note, text || '');
      note.hidden = !text;
    },
    // render: {busy, stopping, disabled, placeholder}
    render({ busy, stopping, disabled, placeholder, sendLabel, reason }) {
      blocked = !!disabled;
      ta.disabled = !!disabled;
      if (placeholder && ta.placeholder !== placeholder) ta.placeholder = placeholder;
      // A control a role cannot use says why.
      setAttr(send, 'title', disabled && reason ? reason : null);
      setAttr(ta, 'title', disabled && reason ? reason : null);
      stop.hidden = !busy;
      stop.disabled = !!stopping;
      setText(stop.querySelector('.label'), stopping ? 'Stopping…' : 'Stop');
      setText(send.querySelector('.label'), sendLabel || 'Send');
      form.classList.toggle('busy', !!busy);
      updateSend();
    },
  };
  return api;
}
