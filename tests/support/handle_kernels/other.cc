// Library B of tests/core/test_handles.py: its own "libb.Plan", which library A's plans are not.
#include <tensorplug/tensorplug.h>

namespace tp = tensorplug;

namespace libb {
struct Plan {
  double scale;
};
}  // namespace libb

TENSORPLUG_HANDLE_TYPE(libb::Plan, "libb.Plan");

namespace {
tp::Handle<libb::Plan> MakePlan(double scale) { return tp::Handle<libb::Plan>(new libb::Plan{scale}); }
double PlanScale(tp::Handle<libb::Plan> plan) { return plan->scale; }
}  // namespace

TENSORPLUG_EXPORT(make_plan, MakePlan, "scale");
TENSORPLUG_EXPORT(plan_scale, PlanScale, "plan");
TENSORPLUG_REGISTER_GLOBAL("libb.plan_scale", PlanScale, "plan");
