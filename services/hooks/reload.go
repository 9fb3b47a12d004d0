package hooks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"time"
)

// watch polls the hooks file every interval and, when its content changed
// and stayed the same for two polls (a file being written is not read half
// way), loads it: a valid edit replaces the hooks in force, an invalid one
// keeps them and is logged with its problems. A deleted file keeps the hooks
// too. (Polling the content, not file events, also sees editors that replace
// the file and mounted ConfigMaps that swap a symlink.) It compares with the
// content New saw, so an edit between New and Run is not missed.
func (s *Service) watch(ctx context.Context, path string, interval time.Duration) {
	applied, pending := s.digest, []byte(nil)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d := digest(path)
		switch {
		case d == nil || bytes.Equal(d, applied):
			pending = nil
		case !bytes.Equal(d, pending):
			pending = d // changed: wait for it to settle
		default:
			applied, pending = d, nil
			s.reload(ctx, path)
		}
	}
}

// reload loads path and, when it is valid, puts it in force.
func (s *Service) reload(ctx context.Context, path string) {
	f, err := Load(path)
	if err == nil {
		probs := f.Check(s.CatalogFrom(ctx, f))
		if errs := Errors(probs); len(errs) > 0 {
			err = &ValidationError{Path: path, Problems: errs}
		}
	}
	if err != nil {
		s.log.Error("hooks file edit refused; the previous hooks stay in force", "file", path, "err", err)
		return
	}
	s.SetHooks(f)
	s.log.Info("hooks file reloaded", "file", path, "hooks", len(f.Hooks))
}

func digest(path string) []byte {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || err != nil {
		return nil
	}
	sum := sha256.Sum256(b)
	return sum[:]
}
