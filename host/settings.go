package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// Session settings. The working directory ("cwd") decides where an agent
// reads and writes files, so it must lie under the configured workspace
// root (Config.WorkspaceRoot): a member must never point an agent at an
// arbitrary server path. Symlinks and ".." are resolved before the check,
// so a link inside the root that leads out of it is refused too.

// SettingCwd is the working-directory setting.
const SettingCwd = "cwd"

// Reasons for refused settings (stable, content-free).
const (
	ReasonCwdOutsideRoot   = "cwd_outside_workspace_root"
	ReasonCwdNotDirectory  = "cwd_not_a_directory"
	ReasonTurnInProgress   = "turn_in_progress"
	ReasonSettingsRejected = "runtime_rejected_settings"
)

// SettingsUpdater is the runtime capability of changing a live
// session's settings. The runtime applies the change to its live provider
// session (or arranges that the next Start uses it) and returns nil, or
// refuses with a *LocalError whose Code is a stable reason. A session the
// runtime does not hold live is not an error: its persisted settings apply
// at the next Start.
type SettingsUpdater interface {
	UpdateSettings(ctx context.Context, ws, sessionID string, settings map[string]string) error
}

// normalizeSettings validates settings and returns them with the working
// directory resolved to an absolute path without symlinks.
func (h *Host) normalizeSettings(in map[string]string) (map[string]string, error) {
	if len(in) > maxSettings {
		return nil, Errorf(CodeInvalidInput, "at most %d settings", maxSettings)
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if k == "" || len(k) > 128 || len(v) > 4096 {
			return nil, Errorf(CodeInvalidInput, "setting names are 1–128 bytes and values at most 4096 bytes")
		}
		out[k] = v
	}
	cwd, ok := out[SettingCwd]
	if !ok || h.workspaceRoot == "" {
		return out, nil
	}
	resolved, err := resolveUnderRoot(h.workspaceRoot, cwd)
	if err != nil {
		return nil, err
	}
	out[SettingCwd] = resolved
	return out, nil
}

// resolveUnderRoot resolves dir (relative paths are taken from the root)
// and checks that the result is the root or lies inside it.
func resolveUnderRoot(root, dir string) (string, error) {
	outside := &Error{Code: CodeInvalidInput, Reason: ReasonCwdOutsideRoot,
		Message: "the working directory must lie under the server's workspace root"}
	if dir == "" || strings.ContainsRune(dir, 0) {
		return "", outside
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(dir))
	if err != nil {
		// A path that does not exist cannot be checked for links: refuse it
		// rather than guess (the message never echoes the path).
		return "", &Error{Code: CodeInvalidInput, Reason: ReasonCwdNotDirectory,
			Message: "the working directory does not exist under the workspace root"}
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", outside
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", &Error{Code: CodeInvalidInput, Reason: ReasonCwdNotDirectory,
			Message: "the working directory is not a directory"}
	}
	return real, nil
}

// ResolveWorkspaceRoot makes a configured root absolute and symlink-free,
// creating it if needed, so later checks compare real paths.
func ResolveWorkspaceRoot(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// updateSettings applies new settings to a session: a live runtime accepts
// them first, and only then are they persisted (seed: UpdateSettings
// serializes with runtime resume). A session whose runtime runs on another
// replica is changed there.
func (h *Host) updateSettings(ctx context.Context, in UpdateSessionInput, settings map[string]string) (Session, error) {
	if !isForwarded(ctx) && h.runsElsewhere(ctx, in.WorkspaceID, in.SessionID) {
		owner, err := h.Owner(ctx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return Session{}, err
		}
		fwd := in
		fwd.Settings = &settings
		var out Session
		if err := h.forward(ctx, owner, forwardUpdate, fwd, &out); err != nil {
			return Session{}, err
		}
		return out, nil
	}
	defer h.locks.lock(in.WorkspaceID, in.SessionID)()
	cur, err := h.store.GetSession(ctx, in.WorkspaceID, in.SessionID)
	if err != nil {
		return Session{}, storeErr(err, "session %s", in.SessionID)
	}
	if !visible(cur) {
		return Session{}, Errorf(CodeNotFound, "session %s not found", in.SessionID)
	}
	if cur.ActiveTurnID != "" {
		return Session{}, &Error{Code: CodeSessionBusy, Reason: ReasonTurnInProgress,
			Message: "settings change once the running turn has settled"}
	}
	if h.runtime != nil {
		if err := h.runtime.UpdateSettings(ctx, in.WorkspaceID, in.SessionID, settings); err != nil {
			var le *LocalError
			if errors.As(err, &le) {
				return Session{}, &Error{Code: CodeOperationConflict, Reason: le.Code,
					Message: "the agent did not accept the settings change; nothing was saved"}
			}
			return Session{}, &Error{Code: CodeUnavailable, Reason: ReasonRuntimeUnavailable, Err: err,
				Message: "the agent did not answer the settings change; nothing was saved"}
		}
	} else if cur.ProviderSessionID != "" {
		return Session{}, &Error{Code: CodeUnsupported, Reason: ReasonSettingsRejected,
			Message: "this agent cannot change a started session's settings"}
	}
	return h.persistUpdate(ctx, in, settings)
}

// persistUpdate writes title, pin and (already accepted) settings.
func (h *Host) persistUpdate(ctx context.Context, in UpdateSessionInput, settings map[string]string) (Session, error) {
	var title string
	if in.Title != nil {
		t, err := normalizeTitle(*in.Title)
		if err != nil {
			return Session{}, err
		}
		title = t
	}
	var out Session
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		s, err := visibleSession(ctx, tx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return err
		}
		if in.Title != nil {
			s.Title, s.TitleExplicit = title, title != ""
		}
		if in.Pinned != nil {
			s.Pinned = *in.Pinned
		}
		if in.Settings != nil {
			s.Settings = settings
		}
		s.UpdatedAt = h.nowUTC()
		out = s
		emit(Fact{WorkspaceID: s.WorkspaceID, Kind: FactSessionChanged, SessionID: s.ID})
		return tx.UpdateSession(ctx, s)
	})
	if err != nil {
		return Session{}, storeErr(err, "session %s", in.SessionID)
	}
	return out, nil
}
