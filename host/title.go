package host

import (
	"strings"
	"unicode/utf8"
)

const maxTitleRunes = 80

// derivedTitle returns the canonical title a prompt establishes, or "" when
// the prompt is not eligible. The first line that is not a slash command is
// eligible; a prompt made only of commands establishes nothing.
func derivedTitle(c MessageContent) string {
	for _, line := range strings.Split(c.Display(), "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" || strings.HasPrefix(line, "/") {
			continue
		}
		return truncateRunes(line, maxTitleRunes)
	}
	return ""
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n-1])) + "…"
}

// applyDerivedTitle establishes a title from the first eligible prompt; an
// explicit or already established title is never overwritten.
func applyDerivedTitle(s *Session, c MessageContent) {
	if s.TitleExplicit || s.Title != "" {
		return
	}
	s.Title = derivedTitle(c)
}

func normalizeTitle(t string) (string, error) {
	t = strings.Join(strings.Fields(t), " ")
	if !utf8.ValidString(t) || strings.ContainsRune(t, 0) {
		return "", Errorf(CodeInvalidInput, "title must be valid UTF-8 without NUL characters")
	}
	if utf8.RuneCountInString(t) > 200 {
		return "", Errorf(CodeInvalidInput, "title is longer than 200 characters")
	}
	return t, nil
}
