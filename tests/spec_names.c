/* spec_names.c: a resource the program names (gpumem_spec_define) composes through specs.
 *
 * - A user-written resource named "mine" builds "pool(mine)" and "faulty(mine)": the very
 *   resource, whose functions then serve the pool's growth.
 * - The table keeps the resource alive; redefining or removing the name lets it go, and the
 *   user's destroy runs once, when nothing holds it any more.
 * - Bad names, a built-in kind's name, removing an unknown name, arguments to a named
 *   resource, a name removed between definition and use, and a resource of another device:
 *   each refused with a status and a message, nothing changed. */
#include "check.h"
#include "forwarding.h"

#include <string.h>

static atomic_int destroyed;

static void count_destroy(void *state) {
  forward_destroy(state);
  atomic_fetch_add(&destroyed, 1);
}

static gpumem_resource *counting_user_resource(int device) {
  gpumem_resource *backing, *mine;
  CHECK_OK(gpumem_cuda_create(device, &backing));
  gpumem_user_resource_ops ops = {
      .size = sizeof ops,
      .version = GPUMEM_USER_RESOURCE_OPS_VERSION,
      .allocate = forward_allocate,
      .deallocate = forward_deallocate,
      .destroy = count_destroy,
      .name = "mine",
  };
  CHECK_OK(gpumem_user_resource_create(device, &ops, backing, &mine));
  return mine;
}

static void test_compose_by_name(void) {
  gpumem_resource *mine = counting_user_resource(0);
  CHECK_OK(gpumem_spec_define("mine", mine));
  CHECK_OK(gpumem_resource_release(mine)); /* the table holds it now */
  gpumem_resource *pool, *faulty;
  CHECK_OK(gpumem_resource_from_spec("pool(mine, initial=1)", &pool));
  CHECK_OK(gpumem_resource_from_spec("faulty(mine)", &faulty));
  gpumem_resource *upstream;
  CHECK_OK(gpumem_resource_upstream(faulty, &upstream));
  void *p, *q;
  CHECK_OK(gpumem_allocate(pool, 1000, NULL, &p));
  CHECK_OK(gpumem_allocate(faulty, 1000, NULL, &q));
  /* The same resource under both: its live count has the pool's growth and faulty's block. */
  CHECK_U64_EQ(check_query(upstream, GPUMEM_QUERY_LIVE_COUNT), 2);
  CHECK_OK(gpumem_deallocate(pool, p, 1000, NULL));
  CHECK_OK(gpumem_deallocate(faulty, q, 1000, NULL));
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_OK(gpumem_resource_release(faulty));
  CHECK_EQ(atomic_load(&destroyed), 0); /* still named */
  CHECK_OK(gpumem_spec_define("mine", NULL));
  CHECK_EQ(atomic_load(&destroyed), 1);
  CHECK_FAILS_WITH(gpumem_resource_from_spec("pool(mine)", &pool), GPUMEM_ERR_INVALID_ARGUMENT,
                   "unknown resource 'mine'");
}

static void test_redefine(void) {
  gpumem_resource *first = counting_user_resource(0), *second = counting_user_resource(0);
  CHECK_OK(gpumem_spec_define("mine", first));
  CHECK_OK(gpumem_spec_define("mine", second)); /* replaces: first is the caller's alone */
  CHECK_OK(gpumem_resource_release(second));
  gpumem_resource *built;
  CHECK_OK(gpumem_resource_from_spec("mine", &built));
  CHECK_PTR_EQ(built, second);
  CHECK_OK(gpumem_resource_release(built));
  int before = atomic_load(&destroyed);
  CHECK_OK(gpumem_resource_release(first));
  CHECK_EQ(atomic_load(&destroyed), before + 1);
  CHECK_OK(gpumem_spec_define("mine", NULL));
  CHECK_EQ(atomic_load(&destroyed), before + 2);
}

static void test_bad_names(void) {
  gpumem_resource *cuda;
  CHECK_OK(gpumem_cuda_create(0, &cuda));
  CHECK_FAILS_WITH(gpumem_spec_define(NULL, cuda), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  static const char *const malformed[] = {
      "",    "1abc",    "a-b",
      "a b", "pool(x)", "a_name_of_sixty_four_characters_is_one_more_than_the_limit_xxxxx"};
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
    CHECK_FAILS_WITH(gpumem_spec_define(malformed[i], cuda), GPUMEM_ERR_INVALID_ARGUMENT,
                     "letters, digits and '_'");
  CHECK_FAILS_WITH(gpumem_spec_define("cuda", cuda), GPUMEM_ERR_INVALID_ARGUMENT,
                   "built-in resource kind");
  CHECK_FAILS_WITH(gpumem_spec_define("never_defined", NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "is not defined");
  /* A named resource takes no arguments; the error marks the parenthesis. */
  CHECK_OK(gpumem_spec_define("plain", cuda));
  gpumem_resource *mr = (gpumem_resource *)0x1;
  CHECK_FAILS_WITH(gpumem_resource_from_spec("pool(plain(initial=1))", &mr),
                   GPUMEM_ERR_INVALID_ARGUMENT, "takes no arguments");
  CHECK_CONTAINS(gpumem_last_error_message(), "           ^");
  CHECK_PTR_EQ(mr, (gpumem_resource *)0x1);
  CHECK_OK(gpumem_spec_define("plain", NULL));
  CHECK_OK(gpumem_resource_release(cuda));
}

static void test_other_device(void) {
  int count = 0;
  CHECK_OK(gpumem_device_count(&count));
  if (count < 2) {
    printf("one device: the device check is not exercised\n");
    return;
  }
  gpumem_resource *on_one;
  CHECK_OK(gpumem_cuda_create(1, &on_one));
  CHECK_OK(gpumem_spec_define("on_one", on_one));
  gpumem_resource *mr = (gpumem_resource *)0x1;
  CHECK_FAILS_WITH(gpumem_resource_from_spec_for_device("pool(on_one)", 0, &mr),
                   GPUMEM_ERR_INVALID_DEVICE, "names a resource of device 1");
  CHECK_PTR_EQ(mr, (gpumem_resource *)0x1);
  CHECK_OK(gpumem_resource_from_spec_for_device("pool(on_one, initial=1)", 1, &mr));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_spec_define("on_one", NULL));
  CHECK_OK(gpumem_resource_release(on_one));
}

int main(void) {
  check_init_backend();
  test_compose_by_name();
  test_redefine();
  test_bad_names();
  test_other_device();
  return 0;
}
