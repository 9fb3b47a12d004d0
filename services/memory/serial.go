package memory

import (
	"context"
	"sync"
)

// threadLocks serialises the worker's handlers per thread: at most one
// handler works on a thread at a time, and the others wait in arrival order
// (a channel's blocked senders are woken first in, first out). Handlers of
// different threads do not wait for each other. Without it, the handlers of
// the four consumers racing on one hot thread would conflict on the
// session's revision and redo their writes.
type threadLocks struct {
	mu sync.Mutex
	m  map[string]*threadLock
}

type threadLock struct {
	refs int // handlers holding or waiting for it; guarded by threadLocks.mu
	sem  chan struct{}
}

func newThreadLocks() *threadLocks { return &threadLocks{m: map[string]*threadLock{}} }

// lock waits until the caller is the only handler of thread, or until ctx
// ends. The returned func releases the thread.
func (l *threadLocks) lock(ctx context.Context, thread string) (unlock func(), err error) {
	l.mu.Lock()
	tl := l.m[thread]
	if tl == nil {
		tl = &threadLock{sem: make(chan struct{}, 1)}
		l.m[thread] = tl
	}
	tl.refs++
	l.mu.Unlock()
	select {
	case tl.sem <- struct{}{}:
		return func() {
			<-tl.sem
			l.release(thread, tl)
		}, nil
	case <-ctx.Done():
		l.release(thread, tl)
		return nil, ctx.Err()
	}
}

func (l *threadLocks) release(thread string, tl *threadLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tl.refs--; tl.refs == 0 {
		delete(l.m, thread)
	}
}

// len is the number of threads held or waited for.
func (l *threadLocks) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
