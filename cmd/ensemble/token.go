package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ensemble-dev/ensemble/auth"
)

// token mints a sign-in token signed with the server's secret (the one in
// ENSEMBLE_JWT_SECRET, or the local one kept in the data dir).
func token(args []string, stdout, stderr io.Writer) error {
	f := newFlags("token", "Mint a sign-in token for local use, signed with the server's HS256 secret.", stderr)
	dataDir := f.string("data-dir", "ENSEMBLE_DATA_DIR", "./ensemble-data", "directory holding the local secret")
	secret := f.string("jwt-secret", "ENSEMBLE_JWT_SECRET", "", "shared HS256 secret (default: the local secret in the data dir)")
	workspace := f.String("workspace", "default", "workspace id the token grants access to; comma-separated for several, each optionally with its own role (w1:admin,w2:viewer)")
	role := f.String("role", "admin", "role in workspaces named without one: viewer, member or admin")
	sub := f.String("sub", "local", "user id (JWT sub)")
	name := f.String("name", "", "display name (default: the user id)")
	ttl := f.Duration("ttl", auth.DefaultTTL, "token lifetime")
	issuer := f.string("jwt-issuer", "ENSEMBLE_JWT_ISSUER", "", "issuer (iss) to put in the token")
	audience := f.string("jwt-audience", "ENSEMBLE_JWT_AUDIENCE", "", "audience (aud) to put in the token")
	claim := f.string("jwt-workspaces-claim", "ENSEMBLE_JWT_WORKSPACES_CLAIM", auth.DefaultWorkspacesClaim, "claim to put the workspace memberships in (the server's setting)")
	link := f.String("addr", "", "when set (host:port), print a sign-in link for that address instead of the bare token")
	if err := f.parse(args); err != nil {
		return err
	}
	r, err := auth.ParseRole(*role)
	if err != nil {
		return err
	}
	key, err := signingSecret(*secret, *dataDir, false)
	if err != nil {
		return err
	}
	ws := map[string]auth.Role{}
	for _, id := range strings.Split(*workspace, ",") {
		id = strings.TrimSpace(id)
		wr := r
		if i := strings.LastIndexByte(id, ':'); i >= 0 {
			if wr, err = auth.ParseRole(id[i+1:]); err != nil {
				return fmt.Errorf("--workspace %s: %w", id, err)
			}
			id = id[:i]
		}
		if id != "" {
			ws[id] = wr
		}
	}
	if len(ws) == 0 {
		return fmt.Errorf("--workspace is required")
	}
	if _, jwks := os.LookupEnv("ENSEMBLE_JWKS_URL"); jwks && *secret == "" {
		fmt.Fprintln(stderr, "note: ENSEMBLE_JWKS_URL is set; a server with a JWKS URL and no ENSEMBLE_JWT_SECRET refuses tokens signed with the local secret")
	}
	if *name == "" {
		*name = *sub
	}
	tok, err := auth.Mint(key, auth.Claims{Sub: *sub, Name: *name, Workspaces: ws, TTL: *ttl, Issuer: *issuer, Audience: *audience,
		WorkspacesClaim: *claim})
	if err != nil {
		return err
	}
	if *link != "" {
		fmt.Fprintln(stdout, signInLink(*link, tok))
		return nil
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// signingSecret is the explicit shared secret, or the local one in
// dataDir, which only the server creates (create): a token signed with a
// secret minted by a client is rejected by every server (run from another
// directory, token used to print a link that could not work).
func signingSecret(explicit, dataDir string, create bool) ([]byte, error) {
	if explicit != "" {
		if len(explicit) < 32 {
			return nil, fmt.Errorf("the JWT secret must be at least 32 bytes")
		}
		return []byte(explicit), nil
	}
	if create {
		return auth.LoadOrCreateSecret(dataDir)
	}
	key, err := auth.LoadSecret(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		abs, _ := filepath.Abs(dataDir)
		return nil, fmt.Errorf("no server secret in %s: `ensemble serve` creates it there on its first start. "+
			"Pass the server's data directory (--data-dir or ENSEMBLE_DATA_DIR) or its shared secret (ENSEMBLE_JWT_SECRET)", abs)
	}
	return key, err
}

// signInLink carries the token in the URL fragment, which browsers never
// send to the server, so it stays out of request lines and access logs.
func signInLink(addr, tok string) string {
	return "http://" + addr + "/#token=" + tok
}
