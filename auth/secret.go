package auth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SecretFile is the name of the local HS256 secret inside the data dir.
const SecretFile = "jwt-secret"

const secretLen = 32

// LoadOrCreateSecret returns the local HS256 secret in <dataDir>/jwt-secret,
// creating a random 32-byte one on first use. The directory is created 0700
// and the file kept 0600: a secret readable by others would let them mint
// tokens, so looser permissions are tightened on load.
func LoadOrCreateSecret(dataDir string) ([]byte, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: data dir: %w", err)
	}
	path := filepath.Join(dataDir, SecretFile)
	b, err := readSecret(path)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	secret := make([]byte, secretLen)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("auth: random secret: %w", err)
	}
	// Write a private temp file, then link it into place: the link fails if
	// another process won the race, and nobody ever sees a partial secret.
	tmp, err := os.CreateTemp(dataDir, SecretFile+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("auth: create secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("auth: create secret: %w", err)
	}
	if _, err := tmp.Write(secret); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("auth: write secret: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("auth: write secret: %w", err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return readSecret(path)
	} else if err != nil {
		return nil, fmt.Errorf("auth: install secret: %w", err)
	}
	return secret, nil
}

func readSecret(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("auth: %s is not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("auth: %s is readable by others and cannot be tightened: %w", path, err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: read secret: %w", err)
	}
	if len(b) < secretLen {
		return nil, fmt.Errorf("auth: %s holds %d bytes; want at least %d", path, len(b), secretLen)
	}
	return b, nil
}

// LoadSecret returns the local secret in <dataDir>/jwt-secret without
// creating one: a token signed with a secret no server uses is worthless,
// so a tool that mints tokens must find the server's. The error wraps
// fs.ErrNotExist when there is none.
func LoadSecret(dataDir string) ([]byte, error) {
	return readSecret(filepath.Join(dataDir, SecretFile))
}
