package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// shipCursor is where a shipper last knew the receiver to stand, kept beside the chain files so
// that a restarted shipper finds its place without reading the files from the start. It is only
// a hint: the receiver's answer decides where shipping resumes, and a cursor that does not match
// both that answer and the file it points into is ignored.
type shipCursor struct {
	URL    string `json:"url"`
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Next   uint64 `json:"next"`
	Prev   string `json:"prev"`
}

// cursorFile names a shipper's cursor in the chain directory. The name never matches
// ChainFiles' pattern, so the cursor is never read as part of the chain.
func cursorFile(dir, name string) string {
	return filepath.Join(dir, "ship-"+name+".cursor")
}

// saveCursor replaces the cursor atomically: a crash leaves the old cursor or the new one,
// never a mix.
func saveCursor(path, url string, pos shipPosition) error {
	data, err := json.Marshal(shipCursor{URL: url, File: pos.file, Offset: pos.offset, Next: pos.next, Prev: pos.prev.String()})
	if err != nil {
		return fmt.Errorf("encoding the ship cursor: %w", err)
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// writeFileAtomic writes a temporary file beside path, syncs it, renames it over path and syncs
// the directory, so that the new name is durable too.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // after a successful rename there is nothing to remove
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		_ = d.Close()
	}
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// loadCursor reads a cursor saved for url. It reports false when there is none, or it was saved
// for another endpoint; an error when it cannot be read as a cursor.
func loadCursor(path, url string) (shipPosition, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return shipPosition{}, false, nil
	}
	if err != nil {
		return shipPosition{}, false, fmt.Errorf("reading the ship cursor: %w", err)
	}
	var c shipCursor
	if err := json.Unmarshal(data, &c); err != nil {
		return shipPosition{}, false, fmt.Errorf("ship cursor %s: %w", path, err)
	}
	if c.URL != url {
		return shipPosition{}, false, nil
	}
	pos := shipPosition{file: c.File, offset: c.Offset, next: c.Next}
	if err := decodeHash(c.Prev, &pos.prev); err != nil {
		return shipPosition{}, false, fmt.Errorf("ship cursor %s: prev: %w", path, err)
	}
	// The file is joined to the directory later: it must be a chain file's bare name.
	if filepath.Base(c.File) != c.File || !strings.HasPrefix(c.File, filePrefix) || !strings.HasSuffix(c.File, fileSuffix) || c.Offset < 0 {
		return shipPosition{}, false, fmt.Errorf("ship cursor %s: %q at %d is not a place in a chain file", path, c.File, c.Offset)
	}
	return pos, true, nil
}
