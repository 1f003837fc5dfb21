package audit

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"strings"
)

// ReadPublicKeys reads the checkpoints' public keys from files, one key a file (PEM, or 32
// bytes raw, hex or base64, as ParsePublicKey takes them), in the order given.
func ReadPublicKeys(files []string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("reading the public key: %w", err)
		}
		key, err := ParsePublicKey(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// ReadTrustedCheckpoint reads a file holding one checkpoint line as the trail holds it (the
// last line of a file closed cleanly, say), checking the line on its own; its signature is
// left to the verification.
func ReadTrustedCheckpoint(path string) (*Checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the trusted checkpoint: %w", err)
	}
	e, err := ParseLine([]byte(strings.TrimSpace(string(data))))
	if err != nil {
		return nil, fmt.Errorf("trusted checkpoint %s: %w", path, err)
	}
	if e.Checkpoint == nil {
		return nil, fmt.Errorf("trusted checkpoint %s: the line is a record, not a checkpoint", path)
	}
	return e.Checkpoint, nil
}

// ExpandChainFiles returns paths with each directory replaced by its chain files, in chain
// order (ChainFiles); a directory without any is an error, and so is a path that does not
// exist.
func ExpandChainFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("audit file: %w", err)
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		inDir, err := ChainFiles(p)
		if err != nil {
			return nil, err
		}
		if len(inDir) == 0 {
			return nil, fmt.Errorf("audit directory %s: no audit-*.jsonl files", p)
		}
		files = append(files, inDir...)
	}
	return files, nil
}
