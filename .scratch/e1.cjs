const D=require('better-sqlite3'); const fs=require('fs');
const dir='/tmp/dx/a'; fs.rmSync(dir,{recursive:true,force:true}); fs.mkdirSync(dir);
const p=dir+'/m.db';
const ls=(t)=>console.log(t, fs.readdirSync(dir).map(f=>f+':'+fs.statSync(dir+'/'+f).size).join(' '));
let w=new D(p); w.pragma('journal_mode=WAL'); w.exec('create table t(x); insert into t values(1)'); ls('after write');
w.close(); ls('rw close');
let r=new D(p,{readonly:true}); r.prepare('select * from t').all(); ls('ro open'); r.close(); ls('ro close');
w=new D(p); w.exec('insert into t values(2)'); const k=new D(p,{readonly:true}); k.prepare('select 1').get(); w.close(); ls('rw close with keeper'); k.close(); ls('keeper close');
r=new D('file:'+p+'?readonly_shm=1',{readonly:true}); console.log(r.prepare('select count(*) c from t').get()); r.close(); ls('ro shm close');
