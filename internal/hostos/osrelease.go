package hostos

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxReleaseFileBytes is the largest os-release (or kairos-release) file ParseOSRelease reads;
// real ones are well under 2 KiB.
const MaxReleaseFileBytes = 64 << 10

// ReleaseError is an os-release file ParseOSRelease refused: Line (from 1; 0 for the whole file)
// and Reason say where and what.
type ReleaseError struct {
	Line   int
	Reason string
}

func (e *ReleaseError) Error() string {
	if e.Line == 0 {
		return e.Reason
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
}

// ParseOSRelease reads the variable assignments of an os-release(5) file, the format of
// /etc/os-release, /usr/lib/os-release and Kairos's /etc/kairos-release: one KEY=value per
// line, blank lines and lines starting with # ignored, values in double quotes (where a
// backslash escapes $, ", \ and `), in single quotes (taken as they are), or bare (where a
// backslash escapes the next character). As in a shell, a key given twice keeps its last value.
// A line that is not an assignment, a key that is not a shell variable name, an unterminated
// quote, text after a closing quote, or invalid UTF-8 is refused, naming the line.
func ParseOSRelease(data []byte) (map[string]string, error) {
	if len(data) > MaxReleaseFileBytes {
		return nil, &ReleaseError{Reason: fmt.Sprintf("%d bytes, more than the %d an os-release file may have", len(data), MaxReleaseFileBytes)}
	}
	if !utf8.Valid(data) {
		return nil, &ReleaseError{Line: invalidUTF8Line(data), Reason: "not valid UTF-8"}
	}
	vars := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, raw, ok := strings.Cut(line, "=")
		if !ok {
			return nil, &ReleaseError{Line: i + 1, Reason: fmt.Sprintf("%q is not a KEY=value assignment", shorten(line))}
		}
		if !isVariableName(key) {
			return nil, &ReleaseError{Line: i + 1, Reason: fmt.Sprintf("%q is not a variable name (letters, digits and _, not starting with a digit)", shorten(key))}
		}
		value, err := unquote(raw)
		if err != nil {
			return nil, &ReleaseError{Line: i + 1, Reason: fmt.Sprintf("the value of %s: %s", key, err)}
		}
		vars[key] = value
	}
	return vars, nil
}

func isVariableName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// unquote reads one value as a shell reads an assignment's word, without expansion.
func unquote(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	var out strings.Builder
	rest := raw
	switch raw[0] {
	case '"':
		closed := false
		for i := 1; i < len(raw); i++ {
			c := raw[i]
			if c == '\\' && i+1 < len(raw) && strings.IndexByte("$\"\\`", raw[i+1]) >= 0 {
				out.WriteByte(raw[i+1])
				i++
				continue
			}
			if c == '"' {
				rest, closed = raw[i+1:], true
				break
			}
			out.WriteByte(c)
		}
		if !closed {
			return "", fmt.Errorf("the double quote is not closed")
		}
	case '\'':
		end := strings.IndexByte(raw[1:], '\'')
		if end < 0 {
			return "", fmt.Errorf("the single quote is not closed")
		}
		out.WriteString(raw[1 : 1+end])
		rest = raw[2+end:]
	default:
		for i := 0; i < len(raw); i++ {
			c := raw[i]
			switch {
			case c == '\\' && i+1 < len(raw):
				out.WriteByte(raw[i+1])
				i++
			case c == '"' || c == '\'':
				return "", fmt.Errorf("a quote inside a bare value (quote the whole value)")
			default:
				out.WriteByte(c)
			}
		}
		return out.String(), nil
	}
	// A shell reads what follows a blank and a # as a comment.
	if after := strings.TrimLeft(rest, " \t"); after != "" && (after == rest || after[0] != '#') {
		return "", fmt.Errorf("%q after the closing quote (quote the whole value once)", shorten(rest))
	}
	return out.String(), nil
}

// invalidUTF8Line is the line (from 1) of the first byte that is not UTF-8.
func invalidUTF8Line(data []byte) int {
	line := 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			return line
		}
		if r == '\n' {
			line++
		}
		data = data[size:]
	}
	return line
}

// shorten keeps a quoted piece of a bad line short enough for an error message.
func shorten(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
