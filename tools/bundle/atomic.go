package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultLockTimeout bounds the wait for another install's lock when the
// caller's context has no deadline.
const DefaultLockTimeout = time.Minute

// lockFile takes an advisory lock (flock) on path, polling until ctx is
// done; unlock releases it. A writer takes it exclusive, creating the file
// if need be; the lock file is left in place: removing it would let two
// processes lock two different files. A reader (a dry run) takes it shared
// and creates nothing: without the file, no install has locked it yet and
// there is nothing to wait for.
func lockFile(ctx context.Context, path string, shared bool) (unlock func(), err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultLockTimeout)
		defer cancel()
	}
	flag, how := os.O_RDWR|os.O_CREATE, syscall.LOCK_EX
	if shared {
		flag, how = os.O_RDONLY, syscall.LOCK_SH
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if shared && errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// writeAtomic writes data to a temporary file beside path, syncs it, and
// renames it over path, then syncs the directory. On error path is as it was.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Chmod(perm); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
