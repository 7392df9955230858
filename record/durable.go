package record

import (
	"errors"
	"os"
	"path/filepath"
)

// What a power loss keeps is what was synced: a closed segment's file, its
// index (written to a temporary file, synced, renamed) and the directory
// entries naming them, so that everything up to the last closed segment
// survives. The open segment is not synced per fragment: a crash loses it at
// most, as a kill -9 does.

// writeFileDurable writes b to path and syncs it before returning.
func writeFileDurable(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes the entries created, renamed or removed in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// makeDirDurable creates dir if it is missing and syncs its parent, so that
// the new directory's entry survives with the segments in it.
func makeDirDurable(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// truncateDurable cuts path to size and syncs it before the index that
// describes the shorter file is written.
func truncateDurable(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
