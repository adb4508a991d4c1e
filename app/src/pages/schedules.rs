//! `/schedules` and `/schedules/:id`: recurring plans — each schedule's
//! expression in words, its next five ticks in the reader's time zone,
//! its last plans and what its last ticks did — with Pause, Resume,
//! Trigger, Delete, and forms to create and edit one. Every action is a
//! plain form, so the pages work without JavaScript.

use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::components::actions::{BUTTON, DisabledButton, OPERATORS_ONLY, PLAIN, outcome};
use crate::components::feed::Feed;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::{EmptyState, FieldError};
use crate::components::session::may_act;
use crate::components::status::PlanStatusBadge;
use crate::components::tables::{DataTable, LINK, TD};
use crate::components::time::{Ago, exact};
use crate::error::DashboardError;
use crate::pages::plan::path_id;
use domain::model::{ScheduleView, ScheduledPlan, TickView};
use domain::views::{ScheduleAction, SchedulePage, SchedulesPage};

#[server(prefix = "/_fn", endpoint = "schedules")]
pub async fn load_schedules() -> Result<SchedulesPage, DashboardError> {
    crate::backend::source()?.schedules().await
}

#[server(prefix = "/_fn", endpoint = "schedule")]
pub async fn load_schedule(id: i64) -> Result<SchedulePage, DashboardError> {
    crate::backend::source()?.schedule(id).await
}

/// Pauses, resumes, triggers or deletes schedule `id`; a deleted one
/// sends the browser back to the list.
#[server(prefix = "/_fn", endpoint = "schedule_act")]
pub async fn schedule_act(kind: ScheduleAction, id: i64) -> Result<String, DashboardError> {
    let who = crate::backend::identity()?;
    let done = crate::backend::source()?
        .schedule_act(&who, id, kind)
        .await?;
    if kind == ScheduleAction::Delete {
        leptos_axum::redirect("/schedules");
    }
    Ok(done)
}

/// Creates a schedule from `file`, or replaces schedule `id`'s; then
/// opens its page.
#[server(prefix = "/_fn", endpoint = "save_schedule")]
pub async fn save_schedule(id: Option<i64>, file: String) -> Result<i64, DashboardError> {
    let who = crate::backend::identity()?;
    let id = crate::backend::source()?
        .schedule_save(&who, id, &file)
        .await?;
    leptos_axum::redirect(&format!("/schedules/{id}"));
    Ok(id)
}

const EXAMPLE: &str = "name: nightly-vacuum
cron: \"30 2 * * *\"
time_zone: Europe/Berlin
overlap: skip
params: {db: orders}
plan:
  name: \"vacuum ${db} ${date}\"
  tasks:
    - {name: vacuum, target: \"db/${db}\", sleep: 1s}";

#[component]
pub fn SchedulesListPage() -> impl IntoView {
    let action = ServerAction::<ScheduleAct>::new();
    let live = use_live(|| Feed::Schedules);
    let data = Resource::new(
        move || (live.track(), action.version().get()),
        move |_| live.or_fetch(load_schedules()),
    );
    view! {
        <Title text="Schedules · Baton" />
        <section class="space-y-4">
            <h1 class="text-2xl font-semibold tracking-tight">"Schedules"</h1>
            <p class="max-w-3xl text-sm text-slate-700">
                "A schedule makes a plan from its template on every tick of its cron expression, exactly once per tick whichever replica leads. Times are shown in your time zone (UTC without JavaScript)."
            </p>
            <div id="action-result" role="status" aria-live="polite">
                {move || action.value().get().map(outcome)}
            </div>
            {loaded(
                data,
                move |p| {
                    if p.schedules.is_empty() {
                        view! {
                            <EmptyState id="schedules-empty">
                                "No schedules yet. Create one below, with baton schedule create, or POST /api/v1/schedules."
                            </EmptyState>
                        }
                            .into_any()
                    } else {
                        let rows = p
                            .schedules
                            .into_iter()
                            .map(|s| view! { <ScheduleRow s now=p.now action /> })
                            .collect_view();
                        let columns = vec!["Schedule", "When", "Next ticks", "Last plans", "Paused", "Actions"];
                        view! {
                            <DataTable id="schedules" caption="Schedules, when they fire next and what they made" columns>
                                {rows}
                            </DataTable>
                        }
                            .into_any()
                    }
                },
            )}
            <ScheduleForm id=None file=String::new() />
        </section>
    }
}

#[component]
fn ScheduleRow(
    s: ScheduleView,
    now: DateTime<Utc>,
    action: ServerAction<ScheduleAct>,
) -> impl IntoView {
    let id = s.id;
    let paused = s.paused_by.is_some();
    view! {
        <tr data-schedule=s.name.clone() data-paused=paused.to_string()>
            <td class=format!("{TD} font-medium break-all")>
                <a class=LINK href=format!("/schedules/{id}")>{s.name.clone()}</a>
            </td>
            <td class=TD><When s=s.clone() /></td>
            <td class=TD><NextTicks ticks=s.next_ticks.clone() /></td>
            <td class=TD><RecentPlans plans=s.plans.clone() compact=true /></td>
            <td class=TD><PausedBy s=s.clone() now /></td>
            <td class=TD>
                <div class="flex flex-wrap gap-2">
                    <Brake action id paused name=s.name.clone() />
                    <ScheduleButton action id kind=ScheduleAction::Trigger label="Trigger now" name=s.name.clone() />
                </div>
            </td>
        </tr>
    }
}

/// The expression, in words, and the policies.
#[component]
fn When(s: ScheduleView) -> impl IntoView {
    let limit = s
        .catch_up_limit
        .map(|n| format!(" (up to {n})"))
        .unwrap_or_default();
    view! {
        <div class="space-y-0.5">
            <code class="font-mono text-sm">{s.cron}</code>
            <p class="schedule-words text-sm text-slate-700">{s.description}</p>
            <p class="text-xs text-slate-600">
                {format!("overlap {}, catch-up {}{limit}", s.overlap, s.catch_up)}
            </p>
        </div>
    }
}

#[component]
fn PausedBy(s: ScheduleView, now: DateTime<Utc>) -> impl IntoView {
    match (s.paused_by, s.paused_at) {
        (Some(by), at) => {
            let at = at.map(|at| view! { " " <Ago at now /> });
            view! { <span class="paused-by font-medium text-amber-900">{format!("by {by}")}{at}</span> }
                .into_any()
        }
        (None, _) => view! { <span class="text-slate-500">"—"</span> }.into_any(),
    }
}

/// The next ticks, in the reader's zone once the page has hydrated.
#[component]
fn NextTicks(ticks: Vec<DateTime<Utc>>) -> impl IntoView {
    if ticks.is_empty() {
        return view! { <span class="text-slate-500">"none (paused, or never again)"</span> }
            .into_any();
    }
    let items = ticks
        .into_iter()
        .map(|at| view! { <li><LocalTime at /></li> })
        .collect_view();
    view! { <ol class="next-ticks space-y-0.5 text-sm tabular-nums">{items}</ol> }.into_any()
}

/// A time in the reader's time zone, named: UTC from the server,
/// rewritten by the browser once hydrated (the server cannot know the
/// reader's zone).
#[component]
fn LocalTime(at: DateTime<Utc>) -> impl IntoView {
    let text = RwSignal::new(exact(at));
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        {
            let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(
                at.timestamp_millis() as f64
            ));
            // With the zone's name: beside "At 02:30 (Europe/Berlin)" a
            // bare "3:30:00 AM" reads as the schedule's own time.
            let options = js_sys::Object::new();
            let _ = js_sys::Reflect::set(&options, &"timeZoneName".into(), &"short".into());
            let local: String = date.to_locale_string("default", &options).into();
            text.set(local);
        }
    });
    view! { <time datetime=at.to_rfc3339() title=exact(at)>{move || text.get()}</time> }
}

#[component]
fn RecentPlans(plans: Vec<ScheduledPlan>, compact: bool) -> impl IntoView {
    if plans.is_empty() {
        return view! { <span class="text-slate-500">"none yet"</span> }.into_any();
    }
    if compact {
        let items = plans
            .into_iter()
            .take(5)
            .map(|p| {
                view! {
                    <li>
                        <a class=LINK href=format!("/plans/{}", p.id)>{format!("#{}", p.id)}</a>
                        " "
                        <PlanStatusBadge status=p.status />
                    </li>
                }
            })
            .collect_view();
        return view! { <ul class="recent-plans space-y-0.5 text-sm">{items}</ul> }.into_any();
    }
    let rows = plans
        .into_iter()
        .map(|p| {
            let tick = match p.tick_at {
                Some(at) => view! { <LocalTime at /> }.into_any(),
                None => view! { <span class="text-slate-600">"triggered"</span> }.into_any(),
            };
            view! {
                <tr data-plan=p.id>
                    <td class=TD><a class=LINK href=format!("/plans/{}", p.id)>{format!("#{} {}", p.id, p.name)}</a></td>
                    <td class=TD>{tick}</td>
                    <td class=TD>
                        <PlanStatusBadge status=p.status />
                        {p.queued.then_some(view! { <span class="ml-1 text-xs text-slate-600">"queued"</span> })}
                    </td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <DataTable id="schedule-plans" caption="Its last ten plans" columns=vec!["Plan", "Tick", "Status"]>
            {rows}
        </DataTable>
    }
    .into_any()
}

#[component]
fn Ticks(ticks: Vec<TickView>) -> impl IntoView {
    if ticks.is_empty() {
        return view! { <p class="text-sm text-slate-600">"No tick has come yet."</p> }.into_any();
    }
    let rows = ticks
        .into_iter()
        .map(|t| {
            let plan = t
                .plan_id
                .map(|id| view! { <a class=LINK href=format!("/plans/{id}")>{format!("#{id}")}</a> });
            let outcome = t.outcome.clone();
            view! {
                <tr data-outcome=t.outcome>
                    <td class=TD><LocalTime at=t.tick_at /></td>
                    <td class=format!("{TD} font-medium")>{outcome}</td>
                    <td class=TD>{plan}</td>
                    <td class=format!("{TD} text-sm text-slate-700")>{t.detail.unwrap_or_default()}</td>
                    <td class=format!("{TD} font-mono text-xs")>{t.recorded_by}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <DataTable id="schedule-ticks" caption="Its last ten ticks" columns=vec!["Tick", "Outcome", "Plan", "Detail", "Replica"]>
            {rows}
        </DataTable>
    }
    .into_any()
}

/// Pause or Resume.
#[component]
fn Brake(action: ServerAction<ScheduleAct>, id: i64, paused: bool, name: String) -> impl IntoView {
    if paused {
        view! { <ScheduleButton action id kind=ScheduleAction::Resume label="Resume" name /> }
    } else {
        view! { <ScheduleButton action id kind=ScheduleAction::Pause label="Pause" name /> }
    }
}

/// One action on a schedule, as a plain form; disabled for viewers.
#[component]
fn ScheduleButton(
    action: ServerAction<ScheduleAct>,
    id: i64,
    kind: ScheduleAction,
    label: &'static str,
    name: String,
) -> impl IntoView {
    let aria = format!("{label} schedule {name}");
    if !may_act() {
        return view! { <DisabledButton label aria action=kind.as_str() why=Some(OPERATORS_ONLY) /> }
            .into_any();
    }
    view! {
        <ActionForm action attr:class="inline">
            <input type="hidden" name="kind" value=kind.as_str() />
            <input type="hidden" name="id" value=id />
            <button type="submit" class=format!("{BUTTON} {PLAIN}") aria-label=aria data-action=kind.as_str()>
                {label}
            </button>
        </ActionForm>
    }
    .into_any()
}

/// Create (no `id`) or edit a schedule from its file; an invalid file is
/// answered at its field and nothing is stored.
#[component]
fn ScheduleForm(id: Option<i64>, file: String) -> impl IntoView {
    if !may_act() {
        return ().into_any();
    }
    let action = ServerAction::<SaveSchedule>::new();
    let text = RwSignal::new(file);
    let error = move || match action.value().get() {
        Some(Err(e)) => Some(e),
        _ => None,
    };
    let (heading, button) = match id {
        None => ("New schedule", "Create schedule"),
        Some(_) => ("Edit this schedule", "Save schedule"),
    };
    view! {
        <section class="max-w-3xl space-y-2" aria-labelledby="schedule-form-heading">
            <h2 id="schedule-form-heading" class="text-lg font-semibold">{heading}</h2>
            <ActionForm action attr:id="schedule-form" attr:class="space-y-3">
                {id.map(|id| view! { <input type="hidden" name="id" value=id /> })}
                <label for="schedule-file" class="text-sm font-medium text-slate-800">"Schedule file (YAML or JSON)"</label>
                <textarea
                    id="schedule-file"
                    name="file"
                    rows="14"
                    required
                    spellcheck="false"
                    placeholder=EXAMPLE
                    aria-invalid=move || error().is_some().to_string()
                    aria-describedby="schedule-error"
                    class="w-full rounded-sm border border-slate-400 bg-white p-2 font-mono text-sm aria-[invalid=true]:border-red-600"
                    prop:value=move || text.get()
                    on:input=move |ev| text.set(event_target_value(&ev))
                >
                    {crate::components::escape::unescaped_child_text(text.get_untracked())}
                </textarea>
                <div id="schedule-error" aria-live="polite">
                    {move || error().map(|e| view! { <FieldError error=e /> })}
                </div>
                <button
                    type="submit"
                    class="rounded-sm bg-blue-700 px-4 py-1.5 text-sm font-medium text-white hover:bg-blue-800 disabled:opacity-60"
                    disabled=move || action.pending().get()
                >
                    {button}
                </button>
            </ActionForm>
        </section>
    }
    .into_any()
}

#[component]
pub fn ScheduleDetailPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || path_id(params.read().get("id"));
    let action = ServerAction::<ScheduleAct>::new();
    let live = use_live(move || Feed::Schedule { id: id() });
    let data = Resource::new(
        move || (id(), live.track(), action.version().get()),
        move |(id, _, _)| live.or_fetch(load_schedule(id)),
    );
    view! {
        <section class="space-y-5">
            {loaded(data, move |p| view! { <ScheduleBody p action /> }.into_any())}
        </section>
    }
}

#[component]
fn ScheduleBody(p: SchedulePage, action: ServerAction<ScheduleAct>) -> impl IntoView {
    let SchedulePage {
        now,
        schedule: s,
        file,
    } = p;
    let id = s.id;
    let paused = s.paused_by.is_some();
    let title = format!("{} · Schedules · Baton", s.name);
    let template = serde_json::from_str::<serde_json::Value>(&s.template)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| s.template.clone());
    view! {
        <Title text=title />
        <header class="space-y-2">
            <nav aria-label="Breadcrumb" class="text-sm">
                <a class=LINK href="/schedules">"Schedules"</a>
                <span class="text-slate-500">{format!(" / schedule {id}")}</span>
            </nav>
            <h1 id="schedule-name" class="text-2xl font-semibold tracking-tight break-all">{s.name.clone()}</h1>
            <When s=s.clone() />
            <p class="text-sm text-slate-600">
                {format!("Created by {}, last changed by {} ", s.created_by, s.updated_by)}
                <Ago at=s.updated_at now />
            </p>
        </header>
        <div id="action-result" role="status" aria-live="polite">
            {move || action.value().get().map(outcome)}
        </div>
        {paused.then(|| view! {
            <p id="schedule-paused" class="rounded-sm border border-amber-300 bg-amber-50 px-3 py-2 text-sm text-amber-900">
                {format!("Paused by {}: its ticks make no plan until it is resumed.", s.paused_by.clone().unwrap_or_default())}
            </p>
        })}
        <div class="flex flex-wrap gap-2">
            <Brake action id paused name=s.name.clone() />
            <ScheduleButton action id kind=ScheduleAction::Trigger label="Trigger now" name=s.name.clone() />
            <ScheduleButton action id kind=ScheduleAction::Delete label="Delete" name=s.name.clone() />
        </div>
        <section class="space-y-2">
            <h2 class="text-lg font-semibold">"Next ticks"</h2>
            <NextTicks ticks=s.next_ticks.clone() />
        </section>
        <section class="space-y-2">
            <h2 class="text-lg font-semibold">"Last plans"</h2>
            <RecentPlans plans=s.plans.clone() compact=false />
        </section>
        <section class="space-y-2">
            <h2 class="text-lg font-semibold">"Last ticks"</h2>
            <Ticks ticks=s.ticks.clone() />
        </section>
        <section class="space-y-2">
            <h2 class="text-lg font-semibold">"Template"</h2>
            <pre id="schedule-template" class="max-h-96 overflow-auto rounded-sm border border-slate-200 bg-white p-3 font-mono text-xs">{template}</pre>
        </section>
        <ScheduleForm id=Some(id) file />
    }
}
