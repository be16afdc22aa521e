/* fk_generate_speculative: the same greedy ids as fk_generate (n-gram lookup, n-gram tree, a draft model, the model
 * as its own draft), statistics filled, bad options reported by status + fk_last_error(). Plain C. */
#include <stdio.h>
#include <string.h>

#include "check.h"

#define OK(cond) CHECK(cond, "%s", "")
#include "flashkit/flashkit.h"

static const int32_t kPrompt[] = {1, 5, 6, 7, 8, 9, 5, 6, 7, 8, 10, 11, 5, 6, 7};
enum { kN = sizeof kPrompt / sizeof kPrompt[0], kMax = 32 };

int main(void) {
  fk_model *t = NULL, *d = NULL;
  OK(fk_model_load(FLASHKIT_TEST_DATA "/models/tiny-llama", "cpu", "f32", 1, &t) == FK_OK);
  OK(fk_model_load(FLASHKIT_TEST_DATA "/models/tiny-llama-bf16", "cpu", NULL, 1, &d) == FK_OK);
  int32_t base[kMax], got[kMax];
  size_t nb = 0, ng = 0;
  OK(fk_generate(t, kPrompt, kN, kMax, 0.0f, 0, 1.0f, 0, base, kMax, &nb) == FK_OK);
  for (int mode = 0; mode < 4; ++mode) {
    fk_spec_options o;
    fk_spec_options_init(&o);
    OK(o.draft == NULL && o.draft_tokens == 4 && o.max_draft_tokens == 8 && o.lookup == 0 && o.tree_width == 1);
    if (mode == 0) o.lookup = 3;
    if (mode == 1) o.lookup = 2, o.tree_width = 4;
    if (mode == 2) o.draft = d, o.draft_tokens = 0;
    if (mode == 3) o.draft = t;
    fk_spec_stats st;
    memset(&st, 0xff, sizeof st);
    OK(fk_generate_speculative(t, kPrompt, kN, kMax, 0.0f, 0, 1.0f, 0, &o, got, kMax, &ng, &st) == FK_OK);
    OK(ng == nb);
    OK(memcmp(got, base, nb * sizeof(int32_t)) == 0);
    OK(st.steps >= 1 && st.accepted >= 0 && st.accepted <= st.proposed && st.emitted == (int64_t)ng - 1);
    OK(st.verifier_s > 0 && st.decode_s > 0);
    if (mode == 3) OK(st.accepted == st.proposed && st.proposed > 0);
  }
  /* Off (NULL options): plain fk_generate, zeroed stats. */
  fk_spec_stats st;
  OK(fk_generate_speculative(t, kPrompt, kN, kMax, 0.0f, 0, 1.0f, 0, NULL, got, kMax, &ng, &st) == FK_OK);
  OK(ng == nb && st.steps == 0);
  /* Bad options: status and message. */
  fk_spec_options o;
  fk_spec_options_init(&o);
  o.lookup = 2, o.draft_tokens = 99;
  OK(fk_generate_speculative(t, kPrompt, kN, kMax, 0.0f, 0, 1.0f, 0, &o, got, kMax, &ng, NULL) ==
        FK_INVALID_ARGUMENT);
  OK(strstr(fk_last_error(), "draft_tokens") != NULL);
  fk_spec_options_init(&o);
  o.draft = d, o.tree_width = 3;
  OK(fk_generate_speculative(t, kPrompt, kN, kMax, 0.0f, 0, 1.0f, 0, &o, got, kMax, &ng, NULL) ==
        FK_INVALID_ARGUMENT);
  OK(strstr(fk_last_error(), "lookup >= 1") != NULL);
  o.tree_width = 1;
  OK(fk_generate_speculative(t, kPrompt, kN, kMax, 0.0f, 0, 1.0f, 0, &o, got, 3, &ng, NULL) ==
        FK_INVALID_ARGUMENT);
  OK(strstr(fk_last_error(), "cap") != NULL);
  fk_model_free(d);
  fk_model_free(t);
  printf("capi spec: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures != 0;
}
