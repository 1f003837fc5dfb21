package profile

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// SetSignature returns a profile file with its signature field set to signature. A block-style
// YAML file keeps everything else as written (comments, order, quoting): the signature line is
// replaced, or added after the last line of the document. Any other file (JSON, flow style, an
// edit that would not read back as the same profile) is written out again as YAML, without its
// comments. The file must decode (Decode).
func SetSignature(file, signature []byte) ([]byte, error) {
	p, err := Decode(file)
	if err != nil {
		return nil, err
	}
	if err := validateSignatureField(signature); err != nil {
		return nil, err
	}
	want := *p.DeepCopy()
	want.Signature = signature
	if edited, ok := editSignatureLine(file, base64.StdEncoding.EncodeToString(signature)); ok {
		if got, err := Decode(edited); err == nil && reflect.DeepEqual(*got, want) {
			return edited, nil
		}
	}
	return marshalProfileYAML(&want)
}

// editSignatureLine replaces the top-level "signature:" entry of a block-style YAML file (with
// any continuation lines), or adds one after the document's last line of content.
func editSignatureLine(file []byte, b64 string) ([]byte, bool) {
	lines := strings.SplitAfter(string(file), "\n")
	eol := "\n"
	if strings.HasSuffix(lines[0], "\r\n") {
		eol = "\r\n"
	}
	entry := "signature: " + b64 + eol

	lastContent := -1
	for i, line := range lines {
		t := strings.TrimSpace(line)
		if isDocumentMarker(strings.TrimRight(line, "\r\n")) {
			if lastContent >= 0 {
				break // the end of the (only) document
			}
			continue
		}
		if t == "" || strings.HasPrefix(t, "#") || strings.HasPrefix(line, "%") {
			continue
		}
		if lastContent < 0 && (strings.HasPrefix(t, "{") || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")) {
			return nil, false // JSON, flow style, or an indented top level
		}
		lastContent = i
		if strings.HasPrefix(line, "signature:") {
			end := i + 1
			for end < len(lines) && continuesEntry(lines[end]) {
				end++
			}
			for end > i+1 && strings.TrimSpace(lines[end-1]) == "" {
				end-- // blank lines after the entry stay
			}
			out := strings.Join(lines[:i], "") + entry + strings.Join(lines[end:], "")
			return []byte(out), true
		}
	}
	if lastContent < 0 {
		return nil, false
	}
	// Past the last line of content, skipping the lines that continue it.
	at := lastContent + 1
	for at < len(lines) && continuesEntry(lines[at]) && strings.TrimSpace(lines[at]) != "" {
		at++
	}
	before := strings.Join(lines[:at], "")
	if !strings.HasSuffix(before, "\n") {
		before += eol
	}
	return []byte(before + entry + strings.Join(lines[at:], "")), true
}

// continuesEntry says whether a line belongs to the top-level entry above it: blank, or indented.
func continuesEntry(line string) bool {
	return strings.TrimSpace(line) == "" || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")
}

// marshalProfileYAML writes a profile as YAML without the empty fields a Go struct would add
// (metadata.creationTimestamp: null, status: {}).
func marshalProfileYAML(p any) ([]byte, error) {
	plain, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(plain, &m); err != nil {
		return nil, err
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		if meta["creationTimestamp"] == nil {
			delete(meta, "creationTimestamp")
		}
		if len(meta) == 0 {
			delete(m, "metadata")
		}
	}
	if status, ok := m["status"].(map[string]any); ok && len(status) == 0 {
		delete(m, "status")
	}
	plain, err = json.Marshal(m)
	if err != nil {
		return nil, err
	}
	out, err := yaml.JSONToYAML(plain)
	if err != nil {
		return nil, fmt.Errorf("writing YAML: %w", err)
	}
	return bytes.TrimLeft(out, "\n"), nil
}
