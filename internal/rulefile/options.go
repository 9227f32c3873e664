package rulefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
)

// DefaultMaxBytes is the largest file read unless an option says otherwise:
// 4 MiB.
const DefaultMaxBytes = 4 << 20

// DefaultMaxItems is the most rules (or policies) a file may hold unless an
// option says otherwise.
const DefaultMaxItems = 10_000

// Options are the settings both readers take through their own Option
// functions. The zero value is not usable: build it with NewOptions.
type Options struct {
	// Label begins every error about a file: "config:" or "rules file".
	Label string
	// MaxBytes bounds the size of a file.
	MaxBytes int64
	// MaxItems bounds the number of rules or policies of a file.
	MaxItems int
	// Log receives the deprecation notices of the files read.
	Log *slog.Logger

	errs []error
}

// NewOptions returns the defaults under label, logging to slog.Default().
func NewOptions(label string) Options {
	return Options{Label: label, MaxBytes: DefaultMaxBytes, MaxItems: DefaultMaxItems, Log: slog.Default()}
}

// Invalid records that an option was given a value it cannot take; Err
// reports it.
func (o *Options) Invalid(option string, format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf("%s: %s", option, fmt.Sprintf(format, args...)))
}

// SetMaxBytes sets MaxBytes, or records under option's name that n is
// below 1.
func (o *Options) SetMaxBytes(option string, n int64) {
	if n < 1 {
		o.Invalid(option, "must be at least 1, got %d", n)
		return
	}
	o.MaxBytes = n
}

// SetMaxItems sets MaxItems, or records under option's name that n is
// below 1.
func (o *Options) SetMaxItems(option string, n int) {
	if n < 1 {
		o.Invalid(option, "must be at least 1, got %d", n)
		return
	}
	o.MaxItems = n
}

// SetLog sets Log; nil discards the notices.
func (o *Options) SetLog(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	o.Log = l
}

// Err reports the invalid options, nil if none.
func (o *Options) Err() error { return errors.Join(o.errs...) }

// ReadFile reads path, reading no more than one byte past MaxBytes: a larger
// file, or an endless one, is an error before any of it is parsed.
func (o *Options) ReadFile(path string) ([]byte, error) {
	data, err := o.ReadPrefix(path)
	if err != nil {
		return nil, err
	}
	if err := o.CheckSize(path, data); err != nil {
		return nil, err
	}
	return data, nil
}

// ReadPrefix reads at most MaxBytes+1 bytes of path: enough to tell that it
// is too large (CheckSize).
func (o *Options) ReadPrefix(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, o.FileError(path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, o.MaxBytes+1))
	if err != nil {
		return nil, o.FileError(path, err)
	}
	return data, nil
}

// CheckSize reports a file larger than MaxBytes.
func (o *Options) CheckSize(name string, data []byte) error {
	if int64(len(data)) > o.MaxBytes {
		return fmt.Errorf("%s %s: the file is larger than %d bytes (see WithMaxBytes)", o.Label, name, o.MaxBytes)
	}
	return nil
}

// FileError is err, met opening or reading name, under the label.
func (o *Options) FileError(name string, err error) error { return PathError(o.Label, name, err) }

// PathError is err, met opening or reading name, under label and the name
// once: an fs.PathError's own operation and path ("stat NAME") would
// repeat them. errors.Is still finds the cause (fs.ErrNotExist,
// fs.ErrPermission).
func PathError(label, name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == name {
		err = pe.Err
	}
	return fmt.Errorf("%s %s: %w", label, name, err)
}

// Notify logs a file's deprecation notice, if it has one.
func (o *Options) Notify(notice string) {
	if notice != "" {
		o.Log.Warn(notice)
	}
}
