package audit

import "github.com/spectrocloud/nodewright/internal/text"

// Shorten bounds a free text to maxBytes bytes, "..." included when it is cut, between two
// characters (text.Shorten).
func Shorten(s string, maxBytes int) string { return text.Shorten(s, maxBytes) }
