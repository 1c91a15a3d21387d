package hub

import (
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

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
	t.emit(protocol.KindTrashChanged, "", protocol.TrashChanged{Workspace: f.WorkspaceID,
		Deleted: nonNil(f.Trash.Deleted), Restored: nonNil(f.Trash.Restored), Purged: nonNil(f.Trash.Purged)})
}
