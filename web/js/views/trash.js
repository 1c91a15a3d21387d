// Delete with undo, and the Trash: deleted sessions listed newest first,
// with Restore (members) and Purge (admins, after a second click). The
// list is live across collaborators: every delete, restore and purge
// (also the server's retention purge) sends the workspace topic a
// trash_changed event, and an open Trash rereads itself on it.

import { h, setText } from '../dom.js';
import { relativeTime } from '../store.js';

const UNDO_MS = 10000;

export function createTrash(root, { request, workspace, role, nameOf = (id) => id, onError, onChanged }) {
  const dialog = root.querySelector('#trash-dialog');
  const list = root.querySelector('#trash-list');
  const empty = root.querySelector('#trash-empty');
  const err = root.querySelector('#trash-error');
  const toast = root.querySelector('#undo-toast');
  const toastText = toast.querySelector('.undo-text');
  const undoBtn = toast.querySelector('#undo-delete');
  let undoTimer = 0;
  let undoId = '';
  let refreshTimer = 0;
  let loading = false;
  let again = false;
  const armed = new Set(); // purge buttons clicked once

  root.querySelector('#trash-open').addEventListener('click', () => open());
  root.querySelector('#trash-close').addEventListener('click', () => dialog.close());
  dialog.addEventListener('close', () => { armed.clear(); clearTimeout(refreshTimer); });
  undoBtn.addEventListener('click', () => undo());

  list.addEventListener('click', async (e) => {
    const btn = e.target.closest('button[data-action]');
    const li = e.target.closest('[data-trash-id]');
    if (!btn || !li) return;
    const id = li.dataset.trashId;
    if (btn.dataset.action === 'purge' && !armed.has(id)) {
      armed.add(id);
      btn.textContent = 'Purge for good?';
      btn.classList.add('armed');
      return;
    }
    btn.disabled = true;
    showError(null);
    try {
      if (btn.dataset.action === 'restore') {
        await request('session.restore', { workspace: workspace(), sessionId: id });
      } else {
        await request('session.purge', { workspace: workspace(), sessionId: id });
      }
      armed.delete(id);
      onChanged();
    } catch (e2) {
      showError(e2);
    }
    refresh();
  });

  function showError(e) {
    setText(err, e ? (e.message || e.code || 'Something went wrong') : '');
    err.hidden = !e;
  }

  function open() {
    showError(null);
    if (!dialog.open) dialog.showModal();
    refresh();
  }

  // refresh rereads the Trash; calls that overlap coalesce into one more.
  async function refresh() {
    if (!dialog.open) return;
    if (loading) { again = true; return; }
    loading = true;
    list.setAttribute('aria-busy', 'true');
    try {
      const page = await request('session.listDeleted', { workspace: workspace(), limit: 200 });
      renderList(page.sessions || []);
    } catch (e) {
      showError(e);
    } finally {
      loading = false;
      list.setAttribute('aria-busy', 'false');
      if (again) { again = false; refresh(); }
    }
  }

  function renderList(items) {
    const admin = role() === 'admin';
    const canRestore = role() === 'member' || admin;
    const now = Date.now();
    list.replaceChildren(...items.map(({ session: s, tombstone: t }) => {
      const title = s.title && s.title.trim() ? s.title : 'Untitled session';
      const restore = h('button', { class: 'btn btn-secondary btn-small', type: 'button', text: 'Restore', dataset: { action: 'restore' } });
      restore.hidden = !canRestore;
      if (!t.restorable) {
        restore.disabled = true;
        restore.title = 'Deleted before restore was lossless: it can only be purged';
      }
      const purge = h('button', { class: 'btn btn-small btn-danger', type: 'button', dataset: { action: 'purge' },
        text: armed.has(s.id) ? 'Purge for good?' : 'Purge' });
      purge.hidden = !admin;
      const who = t.deletedByName || (t.deletedBy && nameOf(t.deletedBy));
      const by = who ? ` by ${who}` : '';
      return h('li', { class: 'trash-item', dataset: { trashId: s.id } },
        h('span', { class: 'trash-title', text: title }),
        h('span', { class: 'trash-meta', text: `Deleted ${relativeTime(t.deletedAt, now)}${by}`,
          title: new Date(t.deletedAt).toLocaleString() }),
        h('span', { class: 'trash-actions' }, restore, purge));
    }));
    empty.hidden = items.length > 0;
  }

  // A workspace event: trash_changed names what one commit moved. Purged
  // rows go at once (nothing can bring them back); the list is reread
  // for the rest, coalescing a burst of changes into one read.
  function onWorkspaceEvent(kind, payload) {
    if (kind !== 'trash_changed') return;
    for (const id of (payload && payload.purged) || []) {
      armed.delete(id);
      const li = [...list.children].find((el) => el.dataset.trashId === id);
      if (li) li.remove();
    }
    empty.hidden = list.children.length > 0;
    if (!dialog.open) return;
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 150);
  }

  async function deleteSession(id, title) {
    try {
      await request('session.delete', { workspace: workspace(), sessionId: id });
    } catch (e) {
      onError(e);
      return;
    }
    undoId = id;
    setText(toastText, `“${title || 'Untitled session'}” moved to the Trash.`);
    toast.hidden = false;
    clearTimeout(undoTimer);
    undoTimer = setTimeout(() => { toast.hidden = true; undoId = ''; }, UNDO_MS);
    onChanged();
  }

  async function undo() {
    const id = undoId;
    toast.hidden = true;
    clearTimeout(undoTimer);
    undoId = '';
    if (!id) return;
    try {
      await request('session.restore', { workspace: workspace(), sessionId: id });
    } catch (e) {
      onError(e);
    }
    onChanged();
  }

  return { open, refresh, onWorkspaceEvent, deleteSession };
}
