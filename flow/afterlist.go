package flow

// afterList holds the functions registered with a call context's
// AfterFunc, to run when it ends. A call's context has one or two (the
// contexts the HTTP client and its transport derive from it), registered
// and mostly removed again while the call runs: they live in the list's
// own two slots, and only more spill to a slice. A map per context (and
// the pointer to each function, its key) was four allocations a call.
//
// The zero list is empty. Guarded by its context's mutex.
type afterList struct {
	inline [2]afterEntry
	items  []afterEntry // nil until used; then over inline, or beyond it
	nextID uint64
}

// afterEntry is a function to run on a goroutine of its own, or a bound
// to end at once (SentOnWriteWithin), as the context package ends a
// context's children: without a function to allocate for it.
type afterEntry struct {
	f     func()
	child *boundCtx
	id    uint64
}

// add registers e and returns its id for remove.
func (l *afterList) add(e afterEntry) uint64 {
	if l.items == nil {
		l.items = l.inline[:0]
	}
	l.nextID++
	e.id = l.nextID
	l.items = append(l.items, e)
	return l.nextID
}

// remove takes the function registered as id out, and reports whether it
// was there (not yet taken to run, nor removed before).
func (l *afterList) remove(id uint64) bool {
	for i, e := range l.items {
		if e.id == id {
			last := len(l.items) - 1
			l.items[i] = l.items[last]
			l.items[last] = afterEntry{}
			l.items = l.items[:last]
			return true
		}
	}
	return false
}

// take returns the functions registered and empties the list for good:
// the context ended, and no function registers after that.
func (l *afterList) take() []afterEntry {
	fs := l.items
	l.items = nil
	return fs
}
