//go:build linux

package blockcopy

// Result is the one machine-readable outcome of a command, printed with
// --json and written to the termination log for the controller.
type Result struct {
	Command      string    `json:"command"` // "copy" or "verify"
	Status       string    `json:"status"`  // ok, mismatch, bad-input, io-error, cancelled
	ExitCode     int       `json:"exitCode"`
	Source       string    `json:"source"`
	Target       string    `json:"target"`
	Algorithm    Algorithm `json:"algorithm"`
	SourceDigest string    `json:"sourceDigest,omitempty"`
	TargetDigest string    `json:"targetDigest,omitempty"`
	BytesTotal   int64     `json:"bytesTotal"`
	BytesWritten int64     `json:"bytesWritten"`
	BytesSkipped int64     `json:"bytesSkipped"`
	Seconds      float64   `json:"seconds"`
	// DirectIO is true when every aligned read and write, including the
	// read-back, bypassed the page cache.
	DirectIO     bool `json:"directIO"`
	TargetZeroed bool `json:"targetZeroed"`
	// Incomplete is true when a copy stopped before writing every byte,
	// or any command was cancelled before it finished.
	Incomplete bool `json:"incomplete"`
	// MismatchChunkOffset and MismatchByteOffset locate the first
	// difference found by verify.
	MismatchChunkOffset *int64 `json:"mismatchChunkOffset,omitempty"`
	MismatchByteOffset  *int64 `json:"mismatchByteOffset,omitempty"`
	Error               string `json:"error,omitempty"`
}

func (r *Result) finish(err error) {
	r.ExitCode, r.Status = Classify(err)
	if err == nil {
		return
	}
	if r.Status == StatusCancelled {
		r.Incomplete = true
	}
	r.Error = err.Error()
	if m, ok := AsMismatch(err); ok {
		r.MismatchChunkOffset, r.MismatchByteOffset = &m.ChunkOffset, &m.ByteOffset
	}
}
