package hub

import "github.com/ensemble-dev/ensemble/host"

// KindTrashChanged is pushed to a workspace's watchers on every committed
// delete, restore and purge (explicit or by retention). A purge changes no
// visible session, so this is the only way an open Trash hears of it.
const KindTrashChanged = "trash_changed"

// TrashChanged is the payload of trash_changed: the ids that entered
// (deleted), left alive (restored) or left for good (purged) the Trash in
// one commit. It may be delivered more than once; applying it twice is
// harmless.
type TrashChanged struct {
	Workspace string   `json:"workspace"`
	Deleted   []string `json:"deleted"`
	Restored  []string `json:"restored"`
	Purged    []string `json:"purged"`
}

// onTrashFact pushes a committed trash change to the workspace topic at
// once: it is the committed change itself, so no reread is needed. It is
// workspace-level (no SessionID), so it must not take markFact's
// everything-dirty path.
func (h *Hub) onTrashFact(f host.Fact) {
	if f.Trash == nil {
		return
	}
	h.mu.Lock()
	var t *topic
	if e := h.workspaces[f.WorkspaceID]; e != nil {
		t = e.ws
	}
	h.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.emit(KindTrashChanged, "", TrashChanged{Workspace: f.WorkspaceID,
		Deleted: nonNil(f.Trash.Deleted), Restored: nonNil(f.Trash.Restored), Purged: nonNil(f.Trash.Purged)})
}
