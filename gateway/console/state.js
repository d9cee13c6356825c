// The console's shared state: the admin key of this tab and what the views last read.

export const KEY_STORE = 'toolmark.adminKey';

export const state = {
  key: sessionStorage.getItem(KEY_STORE) ?? '',
  tenants: [], // as GET /admin/v1/tenants lists them
  stats: null, // the last GET /admin/v1/stats
  history: new Map(), // tenant id -> {conn: number[], cps: number[]}
  selected: null, // {tenant, etag} of the opened tenant
  poll: null,
  /** Called when the admin API refuses the key (signs the tab out). */
  onUnauthorized: null,
  /** Reads the live figures again at once (after an action, rather than at the next poll). */
  refresh: null,
  polling: false,
  pollAgain: false, // a refresh asked for while a poll was running: run one more after it
  streams: new Map(), // name -> AbortController of a running event stream
  view: 'tenants',
};
