package main
import (
 _ "github.com/redis/rueidis"
 _ "github.com/jackc/pgx/v5/pgxpool"
 _ "go.etcd.io/etcd/client/v3"
 _ "modernc.org/sqlite"
 _ "github.com/spf13/cobra"
 _ "pgregory.net/rapid"
 _ "github.com/anishathalye/porcupine"
)
func main(){}
