// Package web is the browser GUI of Ensemble: plain ES modules and CSS,
// no build step, embedded into the binary. The server mounts FS() at "/".
package web

import (
	"embed"
	"io/fs"
)

// static holds only what the browser needs; node unit tests (*.test.mjs)
// and the node package marker stay out of the binary.
//
// web/vendor holds the vendored browser libraries (see
// scripts/refresh-web-vendor.sh); their npm manifests stay out too.
//
//go:embed index.html favicon.svg css/*.css js/*.js js/views/*.js
//go:embed vendor/*/*.js vendor/*/*/*.js vendor/*/*.mjs vendor/*/*.css vendor/*/LICENSE*
var static embed.FS

// FS returns the static root: index.html at its top, then css/ and js/.
func FS() fs.FS { return static }
