package auth

// minRole is the one permission table: the lowest role allowed to run each
// operation. Anything not listed is denied.
var minRole = map[string]Role{
	// viewer: read and watch
	"session.get":  RoleViewer,
	"session.list": RoleViewer,
	"turn.list":    RoleViewer,
	"message.list": RoleViewer,
	"goal.get":     RoleViewer,
	"queue.get":    RoleViewer,
	"subscribe":    RoleViewer,
	"unsubscribe":  RoleViewer,
	// member: also prompt, steer, cancel, answer, goals, fork, title and pin
	"session.create": RoleMember,
	"session.update": RoleMember,
	// continue a session whose agent context is lost in a fresh one
	"session.continueFresh": RoleMember,
	"session.fork":          RoleMember,
	"turn.message.submit":   RoleMember,
	"queue.retract":         RoleMember,
	"turn.interrupt":        RoleMember,
	"turn.cancel":           RoleMember,
	"interaction.respond":   RoleMember,
	"goal.control":          RoleMember,
	"presence.typing":       RoleMember, // only someone who can prompt is "typing"
	// the Trash is read like the session list
	"session.listDeleted": RoleViewer,
	// member: deleting is recoverable (the Trash), so members delete and
	// restore; only permanent removal is an admin's
	"session.delete":  RoleMember,
	"session.restore": RoleMember,
	// admin: also purge
	"session.purge": RoleAdmin,
	// move settled session graphs between installations
	"session.export": RoleAdmin,
	"session.import": RoleAdmin,
}

// Allowed reports whether role may run op. Unknown operations and RoleNone
// are never allowed.
func Allowed(role Role, op string) bool {
	min, ok := minRole[op]
	return ok && role != RoleNone && role >= min
}

// Operations lists every operation the table knows, for documentation and
// for telling an unknown operation from a known but unimplemented one.
func Operations() []string {
	out := make([]string, 0, len(minRole))
	for op := range minRole {
		out = append(out, op)
	}
	return out
}

// KnownOperation reports whether op is in the table.
func KnownOperation(op string) bool {
	_, ok := minRole[op]
	return ok
}
