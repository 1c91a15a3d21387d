// Package auth verifies bearer tokens and maps them to principals with a
// role per workspace. One permission table (Allowed) decides every operation.
package auth

import (
	"fmt"
	"sort"
)

// Role is a workspace membership level. Roles are ordered: a higher role can
// do everything a lower one can.
type Role int

const (
	// RoleNone is the zero value: no membership.
	RoleNone Role = iota
	RoleViewer
	RoleMember
	RoleAdmin
)

// ParseRole reads the wire name of a role.
func ParseRole(s string) (Role, error) {
	switch s {
	case "viewer":
		return RoleViewer, nil
	case "member":
		return RoleMember, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("auth: unknown role %q", s)
}

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleMember:
		return "member"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// MarshalText writes the wire name, so roles are strings in JSON.
func (r Role) MarshalText() ([]byte, error) {
	if r < RoleViewer || r > RoleAdmin {
		return nil, fmt.Errorf("auth: cannot encode role %d", int(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText reads the wire name.
func (r *Role) UnmarshalText(b []byte) error {
	v, err := ParseRole(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Principal is an authenticated caller.
type Principal struct {
	UserID     string          `json:"userId"`
	Name       string          `json:"name,omitempty"`
	Workspaces map[string]Role `json:"workspaces"`
}

// RoleIn returns the principal's role in a workspace; ok is false when the
// principal is not a member.
func (p Principal) RoleIn(ws string) (Role, bool) {
	r, ok := p.Workspaces[ws]
	if !ok || r == RoleNone {
		return RoleNone, false
	}
	return r, true
}

// WorkspaceIDs lists the principal's workspaces in a stable order.
func (p Principal) WorkspaceIDs() []string {
	out := make([]string, 0, len(p.Workspaces))
	for ws, r := range p.Workspaces {
		if r != RoleNone {
			out = append(out, ws)
		}
	}
	sort.Strings(out)
	return out
}
