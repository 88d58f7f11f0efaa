// A hand-written loop nest (kv.name on its parameters) without kv.launch.
func.func @nest(%n: i64 {kv.name = "num_tokens"}) {
  return
}
