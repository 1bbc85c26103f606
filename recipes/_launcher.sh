# Sourced by the launchers in recipes/skyrl and recipes/verl (not run on its own). Two functions:
#   recipe_overrides FILE  prints FILE's overrides, one per line: blank lines and lines starting with
#                          '#' are skipped, surrounding spaces trimmed, and every ${NAME} replaced by
#                          the environment variable NAME (unset NAME: an error). Nothing is evaluated.
#   recipe_run CMD...      runs CMD; with RECIPE_DRY_RUN=1 it prints CMD instead, one line, every
#                          argument shell-quoted (paste it into a shell to run that step alone).

# Ray's `uv run` hook off (arctic_rl_core.ray_uv_hook): the drivers run under `uv run --isolated`, and
# with the hook on Ray starts every worker, the Arctic server's actors included, with that command
# (each one installing its own environment). A value already exported is kept.
export RAY_ENABLE_UV_RUN_RUNTIME_ENV="${RAY_ENABLE_UV_RUN_RUNTIME_ENV:-0}"

recipe_overrides() {
  local file=$1 line out name
  if [[ ! -f $file ]]; then
    echo "recipe: override file '$file' not found" >&2
    return 1
  fi
  while IFS= read -r line || [[ -n $line ]]; do
    line="${line#"${line%%[![:space:]]*}"}"
    line="${line%"${line##*[![:space:]]}"}"
    [[ -z $line || $line == \#* ]] && continue
    out=""
    while [[ $line == *'${'* ]]; do
      out+=${line%%'${'*}
      line=${line#*'${'}
      if [[ ! $line =~ ^([A-Za-z_][A-Za-z0-9_]*)\}(.*)$ ]]; then
        echo "recipe: $file: '\${' must start \${NAME} (NAME: letters, digits, _)" >&2
        return 1
      fi
      name=${BASH_REMATCH[1]}
      line=${BASH_REMATCH[2]}
      if [[ ! -v $name ]]; then
        echo "recipe: $file uses \${$name}, which is not set: export $name=..." >&2
        return 1
      fi
      out+=${!name}
    done
    printf '%s\n' "$out$line"
  done <"$file"
}

recipe_run() {
  if [[ ${RECIPE_DRY_RUN:-0} == 1 ]]; then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# recipe_bird_data: BIRD ($BIRD_DIR) -> $DATA_DIR/{train,dev}.parquet (chat prompts with the database
# schema, gold SQL, absolute database paths), in the light core environment; reused when present.
recipe_bird_data() {
  if [[ -f $DATA_DIR/train.parquet && -f $DATA_DIR/dev.parquet ]]; then
    echo "recipe: reusing $DATA_DIR/{train,dev}.parquet (delete them to preprocess again)" >&2
  else
    recipe_run uv run --isolated --locked --package arctic-rl-core \
      arctic-rl bird preprocess --bird-dir "$BIRD_DIR" --out "$DATA_DIR" --split train,dev
  fi
}

# recipe_train FRAMEWORK OVERRIDES_FILE [OVERRIDE...]: the adapter's entry point in the framework's
# locked GPU environment, with the file's overrides then the given ones (which win). The `flash`
# extra (flash-attn, compiled from its sdist) is added only when the file selects flash attention.
recipe_train() {
  local framework=$1 file=$2 overrides
  shift 2
  overrides=$(recipe_overrides "$file")
  local -a listed extras=(--extra gpu)
  mapfile -t listed <<<"$overrides"
  if grep -Eq '(attn_implementation=flash_attention_|flash_attn=true)' <<<"$overrides"; then
    extras+=(--extra flash)
  fi
  recipe_run uv run --isolated --locked --package "adapter-$framework" "${extras[@]}" \
    python -m "adapter_$framework.main" "${listed[@]}" "$@"
}
