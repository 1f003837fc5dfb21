package replicationupgrade

import (
	"context"
	"sync"
)

// parallel runs fn on every item, at most n at once, and returns the first error (by item
// order) once all have returned. A batch is never larger than the caller hands it.
func parallel[T any](ctx context.Context, n int, items []T, fn func(context.Context, T) error) error {
	errs := make([]error, len(items))
	sem := make(chan struct{}, max(n, 1))
	var wg sync.WaitGroup
	for i, item := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn(ctx, item)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
