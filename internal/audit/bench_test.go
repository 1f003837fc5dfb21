package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
)

func BenchmarkParseLine(b *testing.B) {
	lines := buildChain(b, 100, 1000)
	line := bytes.TrimSuffix(lines[50], []byte("\n"))
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseLine(line); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	data := join(buildChain(b, 20000, 1000))
	opts := VerifyOptions{PublicKeys: []ed25519.PublicKey{testSigner(b).PublicKey()}}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r, err := Verify(opts, Input{Name: "bench", Reader: bytes.NewReader(data)})
		if err != nil || !r.OK {
			b.Fatal(err, r)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/20000, "ns/record")
}

// BenchmarkFileSinkAppend appends durable batches of 1, 10 and 100 records through a log.
func BenchmarkFileSinkAppend(b *testing.B) {
	for _, batch := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			sink, err := OpenFileSink(b.TempDir(), FileSinkOptions{})
			if err != nil {
				b.Fatal(err)
			}
			l := NewLog(sink, testSigner(b), sink.State(), LogOptions{})
			records := make([]Record, batch)
			i := 0
			for b.Loop() {
				for j := range records {
					records[j] = testRecord(i)
					i++
				}
				if _, err := l.Append(context.Background(), records...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "records/s")
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
