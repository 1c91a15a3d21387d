package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/ensemble-dev/ensemble/host"
)

// export and import move settled session graphs between installations
// (host/export.go). They work on the canonical store directly and never
// start an agent; a running server's outbox relay announces imported
// sessions to its watchers.

const exportSummary = `Write the settled session graph of one session's execution tree (the
session, its sub-agent sessions, turns, messages, interactions, settings and
the agent's resume checkpoint) as portable, versioned JSON. The same state
always gives the same bytes.`

const importSummary = `Restore a session graph written by "ensemble export" into a workspace,
owned by the named user. Importing identical content again changes nothing;
different content under the same ids is refused. No agent is started.`

func exportCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("export", exportSummary, stderr)
	dataDir := f.string("data-dir", "ENSEMBLE_DATA_DIR", "./ensemble-data", "directory of the embedded SQLite database")
	dbURL := f.string("database-url", "ENSEMBLE_DATABASE_URL", "", "canonical store: empty for embedded SQLite in the data dir, sqlite://PATH, or postgres://…")
	ws := f.string("workspace", "ENSEMBLE_WORKSPACE", "default", "workspace of the session")
	sid := f.String("session", "", "session id to export (its whole execution tree is written)")
	out := f.String("out", "", "file to write (default: standard output)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *sid == "" {
		f.Usage()
		return fmt.Errorf("--session is required")
	}
	store, err := openCLIStore(ctx, *dbURL, *dataDir, stderr)
	if err != nil {
		return err
	}
	defer store.Close()
	g, err := host.CaptureSessionGraph(ctx, store, *ws, *sid)
	if err != nil {
		return err
	}
	data, err := host.EncodeGraph(g)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(data)
		return err
	}
	return writeFileAtomic(*out, data)
}

func importCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("import", importSummary, stderr)
	dataDir := f.string("data-dir", "ENSEMBLE_DATA_DIR", "./ensemble-data", "directory of the embedded SQLite database")
	dbURL := f.string("database-url", "ENSEMBLE_DATABASE_URL", "", "canonical store: empty for embedded SQLite in the data dir, sqlite://PATH, or postgres://…")
	ws := f.string("workspace", "ENSEMBLE_WORKSPACE", "default", "target workspace")
	user := f.String("user", "", "user id that owns every imported session (required)")
	in := f.String("in", "", "graph file to read (default: standard input)")
	root := f.string("workspace-root", "ENSEMBLE_WORKSPACE_ROOT", "", "working directories in the graph must lie under it, as in serve (default: DATA-DIR/work)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *user == "" {
		f.Usage()
		return fmt.Errorf("--user is required")
	}
	var data []byte
	var err error
	if *in == "" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*in)
	}
	if err != nil {
		return fmt.Errorf("read graph: %w", err)
	}
	g, err := host.DecodeGraph(data)
	if err != nil {
		return err
	}
	if *root == "" {
		*root = filepath.Join(*dataDir, "work")
	}
	realRoot, err := host.ResolveWorkspaceRoot(*root)
	if err != nil {
		return fmt.Errorf("--workspace-root: %w", err)
	}
	store, err := openCLIStore(ctx, *dbURL, *dataDir, stderr)
	if err != nil {
		return err
	}
	defer store.Close()
	res, err := host.RestoreSessionGraph(ctx, store, host.RestoreGraphInput{WorkspaceID: *ws, UserID: *user, Graph: g, WorkspaceRoot: realRoot})
	if err != nil {
		return err
	}
	verb := "imported"
	if !res.Created {
		verb = "already present (identical)"
	}
	_, err = fmt.Fprintf(stdout, "%s: %d sessions into workspace %s, root %s\n", verb, len(res.Sessions), *ws, res.Sessions[0])
	return err
}

func openCLIStore(ctx context.Context, dbURL, dataDir string, stderr io.Writer) (host.Store, error) {
	choice, err := selectStore(dbURL, dataDir)
	if err != nil {
		return nil, err
	}
	if !choice.postgres {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return openStore(ctx, choice, false, log)
}

// writeFileAtomic writes data to path through a temporary file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
