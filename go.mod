module github.com/ensemble-dev/ensemble

go 1.26
