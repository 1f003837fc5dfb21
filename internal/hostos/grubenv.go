package hostos

import (
	"bytes"
	"fmt"
)

// A GRUB environment block is the file GRUB's load_env and save_env read and write, and
// grub-editenv (grub2-editenv on Kairos) edits: the signature line "# GRUB Environment Block",
// then one NAME=VALUE line per variable, then '#' padding to the block's size (1024 bytes as
// grub-editenv creates it). In a value, a backslash and a newline are written with a backslash
// before them. This is GRUB's own format, read here as grub_envblk_iterate reads it and written
// by grub_envblk_set (GNU GRUB grub-core/lib/envblk.c; util/grub-editenv.c creates the file):
// a line starting with '#' is skipped up to the next newline (backslash escapes included);
// any other runs to its first '=' (the name), then to the first newline not escaped (the
// value). GRUB stops at a line it cannot finish ("Broken"); ParseGRUBEnv refuses it instead,
// saying where, and refuses a name GRUB would read across a newline, which grub_envblk_set
// never writes.

// GRUBEnvSignature opens every GRUB environment block (GRUB_ENVBLK_SIGNATURE).
const GRUBEnvSignature = "# GRUB Environment Block\n"

// MaxGRUBEnvBytes is the largest environment block ParseGRUBEnv reads. GRUB's own is 1024
// bytes (DEFAULT_ENVBLK_SIZE); an environment block in a file system's reserved area
// (env_block) may be a few sectors more.
const MaxGRUBEnvBytes = 64 << 10

// GRUBVar is one variable of an environment block.
type GRUBVar struct{ Name, Value string }

// GRUBEnv is an environment block's variables, in the order of the block.
type GRUBEnv []GRUBVar

// Get is the value of name: the last one the block gives, as load_env leaves it (each
// variable is set in turn), and whether the block has it.
func (e GRUBEnv) Get(name string) (string, bool) {
	value, found := "", false
	for _, v := range e {
		if v.Name == name {
			value, found = v.Value, true
		}
	}
	return value, found
}

// GRUBEnvError is an environment block ParseGRUBEnv refused: Offset (in bytes from the block's
// start) and Reason say where and what.
type GRUBEnvError struct {
	Offset int
	Reason string
}

func (e *GRUBEnvError) Error() string {
	return fmt.Sprintf("GRUB environment block, at byte %d: %s", e.Offset, e.Reason)
}

// ParseGRUBEnv reads the variables of a GRUB environment block (above). A block larger than
// MaxGRUBEnvBytes, without GRUB's signature, with a line that has no '=' before its end, an
// empty name, or a value that runs to the block's end is refused, naming the byte.
func ParseGRUBEnv(data []byte) (GRUBEnv, error) {
	if len(data) > MaxGRUBEnvBytes {
		return nil, &GRUBEnvError{Reason: fmt.Sprintf("%d bytes, more than the %d an environment block may have", len(data), MaxGRUBEnvBytes)}
	}
	if !bytes.HasPrefix(data, []byte(GRUBEnvSignature)) {
		return nil, &GRUBEnvError{Reason: fmt.Sprintf("it does not start with GRUB's signature %q", GRUBEnvSignature)}
	}
	var env GRUBEnv
	p := len(GRUBEnvSignature)
	for p < len(data) {
		if data[p] == '#' {
			p = nextGRUBLine(data, p)
			continue
		}
		start := p
		for p < len(data) && data[p] != '=' && data[p] != '\n' {
			p++
		}
		switch {
		case p == len(data):
			return nil, &GRUBEnvError{Offset: start, Reason: "a variable's line ends with the block, before its '='"}
		case data[p] == '\n':
			return nil, &GRUBEnvError{Offset: start, Reason: fmt.Sprintf("the line %q is neither a NAME=VALUE variable nor padding", shortenBytes(data[start:p]))}
		case p == start:
			return nil, &GRUBEnvError{Offset: start, Reason: "a variable with an empty name"}
		}
		name := string(data[start:p])
		p++
		var value []byte
		for {
			if p >= len(data) {
				return nil, &GRUBEnvError{Offset: start, Reason: fmt.Sprintf("the value of %s runs to the block's end, without its newline", shorten(name))}
			}
			c := data[p]
			if c == '\n' {
				break
			}
			if c == '\\' {
				if p+1 >= len(data) {
					return nil, &GRUBEnvError{Offset: p, Reason: fmt.Sprintf("the value of %s ends with a lone backslash", shorten(name))}
				}
				c = data[p+1]
				p++
			}
			value = append(value, c)
			p++
		}
		env = append(env, GRUBVar{Name: name, Value: string(value)})
		p++
	}
	return env, nil
}

// nextGRUBLine is where the line after the one at p starts: past its first newline not
// escaped by a backslash (find_next_line in envblk.c), or the block's end.
func nextGRUBLine(data []byte, p int) int {
	for p < len(data) {
		switch data[p] {
		case '\\':
			p += 2
		case '\n':
			return p + 1
		default:
			p++
		}
	}
	return len(data)
}

func shortenBytes(b []byte) string {
	return shorten(string(b))
}
