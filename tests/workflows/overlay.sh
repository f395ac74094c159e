# Section 10 of tests/workflows/run.sh (sourced, not run): an overlay mount of demo/tiny-model with a
# read token, edited from Python and remounted; `hubfs overlay diff`; `hubfs overlay commit --pr`
# refused with the read token and done with the write token; the stock client's view of the pull
# request (overlay_pr.py).
# shellcheck shell=bash
echo "== overlay (contribute by pull request)"
O="$WORK/overlay"
HF_TOKEN=hf_local_read start_mount overlay setsid demo/tiny-model "$O" --overlay
mount_checks "overlay (read token)" demo/tiny-model "$O" $?
O_PID="$MPID"
"$PY" - "$O" <<'PYEOF' >"$WORK/overlay-edit.out" 2>&1
import json, os, sys
m = sys.argv[1]
cfg = json.load(open(f"{m}/config.json"))
cfg["hidden_size"] = 128
json.dump(cfg, open(f"{m}/config.json", "w"), indent=2)
os.makedirs(f"{m}/notes", exist_ok=True)
json.dump({"accuracy": 0.93}, open(f"{m}/notes/eval.json", "w"))
os.remove(f"{m}/README.md")
os.rename(f"{m}/tokenizer.json", f"{m}/tokenizer-v2.json")
PYEOF
chk "overlay: Python edits config.json, adds notes/eval.json, deletes README.md, renames tokenizer.json" $? ||
  show "$WORK/overlay-edit.out"
timeout 120 "$BIN" unmount "$O" >/dev/null 2>&1
HF_TOKEN=hf_local_read start_mount overlay setsid demo/tiny-model "$O" --overlay
check "overlay: remounted" $?
O_PID="$MPID"
"$BIN" overlay diff "$O" >"$WORK/overlay-diff.out" 2>&1
printf 'D  README.md\nM  config.json\nA  notes/eval.json\nR  tokenizer.json -> tokenizer-v2.json\n' >"$WORK/overlay-diff.want"
sed -n 's/^\([ADMR]  [^ ]*\( -> [^ ]*\)\?\).*/\1/p' "$WORK/overlay-diff.out" | diff - "$WORK/overlay-diff.want" >/dev/null
chk "overlay: after a remount, hubfs overlay diff lists the four changes" $? || show "$WORK/overlay-diff.out"
out="$(HF_TOKEN=hf_local_read timeout 60 "$BIN" overlay commit "$O" -m "Evaluation results" --pr 2>&1)"
[ $? -ne 0 ] && grep -q "write" <<<"$out"
chk "overlay: publishing with the read token is refused, saying a write token is needed" $? || echo "          | $out"
out="$(HF_TOKEN=hf_local_write timeout 120 "$BIN" overlay commit "$O" -m "Evaluation results" --pr 2>&1)"
rc=$?
[ $rc -eq 0 ] && grep -q "^opened pull request #[0-9]* on main: http" <<<"$out"
chk "overlay: hubfs overlay commit --pr with a write token prints the pull request's URL" $? || echo "          | $out"
run_py overlay_pr.py 120 demo/tiny-model "$O" "Evaluation results"
out="$("$BIN" overlay diff "$O" 2>&1)"
grep -q "^no changes over demo/tiny-model@" <<<"$out"
chk "overlay: the layer is empty after the publish" $? || echo "          | $out"
timeout 120 "$BIN" unmount "$O" >/dev/null 2>&1
! alive "$O_PID"
check "overlay: unmounted" $?

