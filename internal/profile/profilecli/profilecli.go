// Package profilecli is what the nodewright-profile command does, as functions that write to an
// io.Writer, so that other commands (a kubectl plugin) can run them too. Flags are the caller's
// business.
package profilecli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/profile"
)

// The environment variables the password of a private key is read from, in this order.
const (
	PasswordEnv       = "NODEWRIGHT_PROFILE_PASSWORD"
	CosignPasswordEnv = "COSIGN_PASSWORD"
)

// Env is what a command reads and writes besides its arguments.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// LookupEnv reads an environment variable, as os.LookupEnv does.
	LookupEnv func(string) (string, bool)
}

// OSEnv is the process's own environment.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, LookupEnv: os.LookupEnv}
}

// UsageError is a mistake in how a command was called (a missing argument, a file that cannot be
// read, a key file that is not a key), as opposed to a profile that is wrong. The command exits
// with status 2 for it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// password returns the password from the environment, and whether one is set (it may be empty).
func (e Env) password() ([]byte, bool) {
	for _, name := range []string{PasswordEnv, CosignPasswordEnv} {
		if v, ok := e.LookupEnv(name); ok {
			return []byte(v), true
		}
	}
	return nil, false
}

// readInput reads a file, or standard input for "-".
func (e Env) readInput(name string) ([]byte, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(io.LimitReader(e.Stdin, profile.MaxFileSize+1))
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	return data, nil
}

// readProfile reads and decodes a profile file; a file that does not decode is the profile's
// fault, not a usage error.
func (e Env) readProfile(name string) ([]byte, *v1alpha1.EdgeProfile, error) {
	data, err := e.readInput(name)
	if err != nil {
		return nil, nil, err
	}
	p, err := profile.Decode(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", displayName(name), err)
	}
	return data, p, nil
}

func displayName(name string) string {
	if name == "-" {
		return "standard input"
	}
	return name
}

// Keygen writes a new key pair to prefix.key and prefix.pub, as cosign generate-key-pair does,
// encrypting the private key with the password from the environment. It never overwrites a file.
func Keygen(env Env, prefix string) error {
	if prefix == "" {
		return usageErrorf("the key prefix is empty")
	}
	password, ok := env.password()
	if !ok {
		return usageErrorf("set %s (or %s) to the password to encrypt the private key with; it may be empty", PasswordEnv, CosignPasswordEnv)
	}
	keyPath, pubPath := prefix+".key", prefix+".pub"
	for _, p := range []string{keyPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return usageErrorf("%s already exists; remove it or choose another --output-key-prefix", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return &UsageError{Err: err}
		}
	}
	privPEM, pubPEM, err := profile.GenerateKeyPair(password)
	if err != nil {
		return err
	}
	if err := writeNew(keyPath, privPEM, 0o600); err != nil {
		return err
	}
	if err := writeNew(pubPath, pubPEM, 0o644); err != nil {
		_ = os.Remove(keyPath)
		return err
	}
	fmt.Fprintf(env.Stderr, "Private key written to %s\nPublic key written to %s\n", keyPath, pubPath)
	return nil
}

// writeNew creates a file that must not exist yet.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return &UsageError{Err: err}
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	return f.Close()
}

// Canonical writes the canonical encoding of the profile's spec, the bytes its signature
// covers, with nothing after them (no newline): the file cosign sign-blob signs.
func Canonical(env Env, file string) error {
	_, p, err := env.readProfile(file)
	if err != nil {
		return err
	}
	blob, err := profile.Canonical(p.Spec)
	if err != nil {
		return err
	}
	_, err = env.Stdout.Write(blob)
	return err
}

// Digest writes the digest of the profile's spec (sha256:...) and a newline.
func Digest(env Env, file string) error {
	_, p, err := env.readProfile(file)
	if err != nil {
		return err
	}
	d, err := profile.Digest(p.Spec)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, d)
	return nil
}

// Sign signs the profile's spec with the private key in keyFile and writes the profile with its
// signature field set, as YAML: to the standard output, or back to the file when rewrite is set.
// The password of an encrypted key comes from the environment.
func Sign(env Env, file, keyFile string, rewrite bool) error {
	if keyFile == "" {
		return usageErrorf("--key is required: the private key to sign with (cosign.key)")
	}
	if rewrite && file == "-" {
		return usageErrorf("-w rewrites a file; it cannot rewrite standard input")
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return &UsageError{Err: err}
	}
	password, havePassword := env.password()
	if !havePassword && bytes.Contains(keyPEM, []byte("-----BEGIN ENCRYPTED ")) {
		return usageErrorf("%s is encrypted: set %s (or %s) to its password", keyFile, PasswordEnv, CosignPasswordEnv)
	}
	key, err := profile.LoadPrivateKey(keyPEM, password)
	if err != nil {
		if errors.Is(err, profile.ErrWrongPassword) {
			return fmt.Errorf("%s: %w", keyFile, err)
		}
		return &UsageError{Err: fmt.Errorf("%s: %w", keyFile, err)}
	}
	data, p, err := env.readProfile(file)
	if err != nil {
		return err
	}
	sig, err := profile.Sign(p.Spec, key)
	if err != nil {
		return fmt.Errorf("%s: %w", displayName(file), err)
	}
	signed, err := profile.SetSignature(data, sig)
	if err != nil {
		return fmt.Errorf("%s: %w", displayName(file), err)
	}
	digest, err := profile.Digest(p.Spec)
	if err != nil {
		return err
	}
	if !rewrite {
		_, err := env.Stdout.Write(signed)
		return err
	}
	if err := replaceFile(file, signed); err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "Signed %s (spec.version %s, %s) with key %s\n", file, p.Spec.Version, digest, key.Public().ID())
	return nil
}

// replaceFile writes data to path through a temporary file in the same folder, keeping the
// file's permissions, so a crash leaves the old file or the new one, never half of one.
func replaceFile(path string, data []byte) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(info.Mode().Perm()); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Verify checks the profile's signature against the public keys in keyFiles and writes which
// key verified it. An error that is not a UsageError means the profile is invalid.
func Verify(env Env, file string, keyFiles []string) error {
	if len(keyFiles) == 0 {
		return usageErrorf("--key is required: the trusted public key(s) (cosign.pub)")
	}
	var trusted []profile.PublicKey
	source := map[profile.KeyID]string{}
	for _, name := range keyFiles {
		data, err := os.ReadFile(name)
		if err != nil {
			return &UsageError{Err: err}
		}
		keys, err := profile.ParsePublicKeys(data)
		if err != nil {
			return &UsageError{Err: fmt.Errorf("%s: %w", name, err)}
		}
		for _, k := range keys {
			if _, seen := source[k.ID()]; !seen {
				source[k.ID()] = name
				trusted = append(trusted, k)
			}
		}
	}
	_, p, err := env.readProfile(file)
	if err != nil {
		return err
	}
	id, err := profile.Verify(p.Spec, p.Signature, trusted)
	if err != nil {
		return fmt.Errorf("%s: signature: %w", displayName(file), err)
	}
	digest, err := profile.Digest(p.Spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "Verified OK: %s (spec.version %s, %s) is signed by %s (%s)\n",
		displayName(file), p.Spec.Version, digest, id, source[id])
	return nil
}

// ExitCode is the exit status for a command's error: 0 for none, 2 for a UsageError, 1 for any
// other.
func ExitCode(err error) int {
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		return 2
	}
	return 1
}

// Describe writes an error for the terminal, with one line per field when several fields are
// wrong.
func Describe(err error) string {
	msg := err.Error()
	var fes profile.FieldErrors
	if !errors.As(err, &fes) || len(fes) < 2 || !strings.HasSuffix(msg, fes.Error()) {
		return msg
	}
	lines := []string{strings.TrimSuffix(strings.TrimSuffix(msg, fes.Error()), " ")}
	for _, fe := range fes {
		lines = append(lines, "  "+fe.Error())
	}
	return strings.Join(lines, "\n")
}
