// The header: product name, workspace (a picker when there are several),
// the signed-in user and the connection state pill (#conn-state).

import { h, setText, setAttr, initials } from '../dom.js';

export function createHeader(root, { onWorkspace, onSignOut, onReconnect, onToggleSidebar }) {
  const wsLabel = root.querySelector('#workspace-name');
  const wsSelect = root.querySelector('#workspace-select');
  const conn = root.querySelector('#conn-state');
  const connLabel = conn.querySelector('.conn-label');
  const user = root.querySelector('#user');
  const userName = user.querySelector('.user-name');
  const userAvatar = user.querySelector('.avatar');
  const signOut = root.querySelector('#sign-out');
  const menuBtn = root.querySelector('#sidebar-toggle');

  wsSelect.addEventListener('change', () => onWorkspace(wsSelect.value));
  signOut.addEventListener('click', () => onSignOut());
  conn.addEventListener('click', () => onReconnect());
  menuBtn.addEventListener('click', () => onToggleSidebar());

  let wsKey = '';
  let tick = 0;
  let lastConn = null;

  function renderConn() {
    const c = lastConn;
    if (!c) return;
    let label;
    let state = c.state;
    if (state === 'connected') {
      label = 'Connected';
    } else if (state === 'reconnecting') {
      const secs = c.retryAt ? Math.max(0, Math.ceil((c.retryAt - Date.now()) / 1000)) : 0;
      if (!c.connectedOnce && !c.retryAt) label = 'Connecting…';
      else label = secs > 0 ? `Reconnecting in ${secs} s` : 'Reconnecting…';
    } else {
      state = 'offline';
      label = c.fatal ? 'Disconnected' : 'Offline';
    }
    setAttr(conn, 'data-state', state);
    setText(connLabel, label);
    const lines = [];
    if (c.epoch) lines.push(`Server epoch: ${c.epoch}`);
    if (c.connectionId) lines.push(`Connection: ${c.connectionId}`);
    if (state !== 'connected' && c.reason) lines.push(`Last problem: ${c.reason}`);
    if (state === 'reconnecting') lines.push('Click to retry now');
    setAttr(conn, 'title', lines.join('\n') || 'Not connected yet');
    setAttr(conn, 'data-epoch', c.epoch || null);
  }

  return {
    setUser(principal) {
      setText(userName, principal.name);
      setText(userAvatar, initials(principal.name));
      setAttr(user, 'title', principal.id ? `Signed in as ${principal.name} (${principal.id})` : principal.name);
    },
    setWorkspaces(list, current) {
      const key = JSON.stringify(list) + '|' + current;
      if (key === wsKey) return;
      wsKey = key;
      const many = list.length > 1;
      wsSelect.hidden = !many;
      wsLabel.hidden = many;
      const cur = list.find((w) => w.id === current);
      setText(wsLabel, current || 'no workspace');
      setAttr(wsLabel, 'title', cur && cur.role ? `Your role: ${cur.role}` : null);
      if (many) {
        wsSelect.replaceChildren(...list.map((w) => h('option', { value: w.id, text: w.role ? `${w.id} · ${w.role}` : w.id })));
        wsSelect.value = current;
      }
    },
    setConnection(c) {
      lastConn = c;
      renderConn();
      clearInterval(tick);
      if (c.state === 'reconnecting' && c.retryAt) tick = setInterval(renderConn, 500);
    },
  };
}
