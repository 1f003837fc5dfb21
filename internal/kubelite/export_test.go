package kubelite

// For the tests of package kubelite_test.

// InClusterAt is InCluster with the service account's files in dir.
var InClusterAt = inCluster

// SetServiceAccountDir points InCluster at dir until the returned function is called.
func SetServiceAccountDir(dir string) (restore func()) {
	old := serviceAccountDir
	serviceAccountDir = dir
	return func() { serviceAccountDir = old }
}

// StartAt makes the first watch start at rv, without a list first.
func (lw *ListWatch) StartAt(rv string) { lw.setResourceVersion(rv) }

// Requests says how many lists and watches lw has made.
func (lw *ListWatch) Requests() (lists, watches int) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.lists, lw.watches
}

// ResourceVersion is where lw's next watch starts.
func (lw *ListWatch) ResourceVersion() string { return lw.resourceVersion() }
