package main

import "sync"

// keys runs a key's records one at a time in offset order: the first
// record of an idle key goes to the workers; later ones wait in its queue
// until the worker that ran the one before takes them.
type keys struct {
	mu sync.Mutex
	m  map[string]*[]job // key busy; its records waiting, oldest first
}

func newKeys() *keys { return &keys{m: map[string]*[]job{}} }

// take reports whether j may run now; if not, it is queued behind its key.
func (k *keys) take(j job) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if q, busy := k.m[string(j.rec.Key)]; busy {
		*q = append(*q, j)
		return false
	}
	k.m[string(j.rec.Key)] = new([]job)
	return true
}

// next returns the record of done's key to run next, if one waits; if
// none does, the key is idle again.
func (k *keys) next(done job) (job, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	q := k.m[string(done.rec.Key)]
	if len(*q) == 0 {
		delete(k.m, string(done.rec.Key))
		return job{}, false
	}
	j := (*q)[0]
	*q = (*q)[1:]
	return j, true
}
